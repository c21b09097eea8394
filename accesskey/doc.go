// Package accesskey keeps the access keys of `memosrt serve`: bearer
// tokens that may use a set of cubes, each with the Read or the Write
// right (Write includes Read), until an optional expiry, where the admin
// token may use all.
//
// A Store keeps its keys in the text tier's store (textmem.Backend), in
// its space textmem.KeySpace, so that every node sharing that store (the
// PostgreSQL backend) sees the same keys: h/<SHA-256 of the token, hex> →
// the Key as JSON, and i/<id> → that hash, for listing and revoking by id.
// The token is shown once, when it is made, and never stored. Nothing is
// cached: every Lookup reads the store, so a key revoked on one node is
// refused by the next request on every node. Migrate moves the keys a data
// directory kept itself before (srv/key/<hash> → one cube, read as a
// Write grant) into the store.
//
// A Grant remembers the creation time of the cube it was made for, so that
// a cube deleted and made again under the same name is another cube the
// old grant does not open: a Guard, which reads the cubes' records
// (CubeRecords), binds the grants it makes and checks that (Guard.Allows),
// as it checks expiry (Guard.Lookup) against its clock; Key.Allows checks
// the grants alone. Package memosrt's OS keys methods delegate to a Guard.
//
// Main types: Store (safe for concurrent use: every call is one
// transaction of the backend), Guard, Key, Grant, Right, Spec. Errors are
// in errors.go.
package accesskey
