// Package postgres keeps the text tier's records (textmem.Backend) in a
// PostgreSQL database that several memosrt nodes share: a memory added on
// one node is found by every one, each node's index following the others'
// commits through LISTEN/NOTIFY.
//
// It is optional, as a database/sql driver is: an app that wants it
// imports it and passes the Store as memosrt's Options.TextStore;
// `memosrt serve --text-store postgres://...` does this. The root package
// does not import it, so apps that keep their memories in the data
// directory do not link pgx.
//
// Main types: Store (a pgx connection pool, safe for concurrent use),
// Options. With Options.Key every value is sealed (AES-256-GCM) and every
// key and cube name replaced by an HMAC tag before it leaves the process.
package postgres
