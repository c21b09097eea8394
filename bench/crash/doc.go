// Package crash holds the crash-safety harness of memosrt (tests only).
//
// TestCrashRecovery runs the real `memosrt serve` on one data directory
// under a write load over its memory API (cube creates, memory adds,
// updates and deletes, pack warms, cube deletes; four client goroutines,
// one cube each), kills it with SIGKILL at a random moment, restarts it and
// checks that:
//
//   - every acknowledged write is there (a memory add, update or delete, a
//     warmed pack, a cube delete whose 2xx response the client read);
//   - the one unacknowledged operation of each client is either wholly
//     applied or not at all: a memory text is byte-identical to a text that
//     was sent, never a part of one, and no memory appears that nobody added;
//   - every pack the activation tier lists has its whole blob (it decodes
//     and passes its checksums), and after kvcache.Open no blob chunk is
//     left without its pack header;
//   - every memory of a cube is found by a search for its unique term in
//     that cube, and only there (index and records agree, cubes isolated).
//
// Every other cycle the harness opens the directory itself right after the
// kill (recovery in the test process, then the raw checks); the cycles in
// between let the restarted server recover the crashed directory itself.
// About one cycle in seven kills the server during its start-up (Badger
// replay, kvcache orphan removal, model load) instead of under load.
//
// TestBackupUnderLoad takes `memosrt backup` of a served directory while
// the same four clients write to it, restores the file with `memosrt
// restore` into a new directory and serves it: each cube holds exactly a
// state its client reached at or after its last write acknowledged before
// the backup began (one consistent snapshot, nothing acknowledged lost),
// no tier state names a missing pack (read from the restored directory
// before it is served, and through the served API, where a state that
// moved on between two reads, by a tier job of the restored server, is
// read again), and the raw checks above pass on the copy. It also restores an offline backup of the killed directory to
// exactly its last state, and sees a truncated file and a non-empty target
// refused with nothing left behind; plain and encrypted.
//
// MEMOSRT_CRASH_CYCLES sets the number of cycles (default 100, 10 with
// -short), MEMOSRT_CRASH_SEED the random seed (default: the clock; the seed
// is logged so that a failure can be replayed). A SIGKILL leaves what the
// process wrote in the page cache, so this checks crash consistency of the
// process, not durability across power loss (which rests on Badger's
// SyncWrites, on by default in package datadir).
package crash
