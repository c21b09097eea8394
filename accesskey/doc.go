// Package accesskey keeps the access keys of `memosrt serve`: bearer
// tokens that may use one cube only (its memories, packs, chats and
// exports), where the admin token may use all.
//
// A Store holds, under the data directory's key prefix srv/key/, the
// SHA-256 of each token (hex) → the Key as JSON; the token itself is shown
// once, when it is made, and never stored. A Key remembers the creation
// time of the cube it was made for, so that a cube deleted and made again
// under the same name is another cube the old key does not open: the
// caller, which knows the cubes, checks that (memosrt's OS.KeyCube).
//
// Main types: Store (safe for concurrent use: every call is one Badger
// transaction), Key. Writes go through datadir.DB.Write, which refuses with
// datadir.ErrNoSpace when the disk lacks room.
package accesskey
