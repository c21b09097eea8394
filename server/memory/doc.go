// Package memory serves memosrt's memory API over HTTP, one translation
// to a memosrt.OS call a route: cubes (create, list, get, delete, export
// as a tar archive, import one), their memories (add, one or a batch;
// list, get, update, delete), search, KV packs (warm, status, every
// stored pack), each memory's tier and heat and a tier tick now, the LoRA
// adapters a cube can attach, the conversation memory (messages recorded
// as turns with an extraction job; jobs and their undo; the long-term
// profile; the short-term turns and mid-term sessions; a memory's change
// log), access keys (create, list without secrets, get, revoke) and
// sharing a cube with a key, and an online backup of the data directory.
//
// Main types: API (New, then Register on the server's wire.Router),
// Options, and CubeView (a cube as the API shows it). Requests decode
// strictly (wire.DecodeStrict: every field is ours) and errors are
// answered with package wire's status table. Register gives each route
// what it needs (wire.Need: read or write on the path's cube, or the
// admin token); authentication and those checks are the mounting
// server's, and the cube list shows an access key's cubes only
// (wire.Key).
//
// Concurrency: an *API holds no state of its own and is safe for
// concurrent use; each request goes through the memosrt.OS's own locking.
package memory
