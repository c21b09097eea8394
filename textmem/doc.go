// Package textmem is the text tier of memosrt: plaintext memories kept per
// cube (one user's or agent's namespace) in a Backend, and found again by
// retrieval. The default Backend is the embedded Badger database (key
// prefix t/<cube>/, NewBadgerBackend); package textmem/postgres keeps the same records
// in PostgreSQL for several nodes to share, each following the others'
// commits through LISTEN/NOTIFY (Watcher).
//
// A Store (Open) adds, reads, updates (keeping every version, see History)
// and deletes Memory values, and answers Search with BM25 over an inverted
// index whose postings and per-cube statistics are persisted next to the
// texts and written in the same transaction. On the first use of a cube the
// Store loads that cube's persisted index (not its texts) into memory;
// searches then read only the in-memory index and the winning memories.
// SearchWith adds filters (kind, tags, event and creation time ranges), a
// second tier for kinds ranked after all others (Query.LastKinds),
// dense retrieval fused with the lexical ranks when an Embedder is set, an
// event-time recency boost and neighbour expansion.
//
// Cubes are isolated: no call on cube A reads or writes a key of cube B.
// Exact duplicates (same normalised text and event time) are detected inside
// the write transaction, so concurrent identical Adds store one memory; near
// duplicates (Options.NearDuplicate) are merged into the existing memory as
// a new version. EventTime (when the remembered thing happened) is kept
// apart from Created and Updated (when it was stored); all are UTC, and
// ParseEventTime reads user input with its offset. Delete removes a
// memory's text, history, postings and vector and then calls
// Options.OnDelete.
//
// Dense retrieval goes through an embed.Embedder and a VectorIndex (exact
// FlatIndex by default; an ANN index can be plugged in through
// Options.NewVectorIndex). Vectors are stored next to the texts, tagged
// with the embedder's Name.
//
// Over Badger every record carries a CRC-32C of its key and value; a
// record that fails it, or that Badger cannot read back, is ErrDamaged
// naming the record, and so is a memory whose doc record reads back in
// the same snapshot while its own record does not (the two are written
// and deleted in one transaction): Get refuses it, List and Search leave
// it out, and
// each is logged and counted (Damaged). Check and RepairIndex are memosrt
// check's per-cube verification and index rebuild.
//
// A Store is safe for concurrent use. Writes to one cube are serialised
// within a Store; writes to different cubes and all reads run in parallel.
// Only one Store may be open over a Badger database at a time; over
// PostgreSQL any number may, in any processes: their writes are
// SERIALIZABLE transactions, retried on conflict.
package textmem
