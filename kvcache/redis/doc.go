// Package redis keeps the activation tier's shared level (kvcache.Shared)
// in a Redis server, so that several memosrt nodes find each other's KV
// packs: a pack one node saves is restored by another instead of being
// prefilled again.
//
// It is optional, as a database/sql driver is: an app that wants it
// imports it and passes the Store as kvcache.Options.Shared (memosrt's
// Options.SharedKV); `memosrt serve --kv-store redis://HOST:PORT/DB` does
// this. The root package does not import it, so apps that do not want a
// shared level do not link the Redis client.
//
// Main types: Store (one connection pool, safe for concurrent use),
// Options. Redis evicts by its own maxmemory-policy; an evicted pack is a
// miss, never an error.
package redis
