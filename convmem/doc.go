// Package convmem is the memory a cube's conversations write by
// themselves, after MemoryOS (Kang et al., "Memory OS of AI Agent", 2025;
// github.com/BAI-LAB/MemoryOS) and MemOS's MemReader:
//
//   - short-term: every recorded chat turn (Turn) joins a bounded per-cube
//     queue, oldest first (Options.ShortTermLen turns);
//   - mid-term: when the queue overflows, its oldest turns are moved, as one
//     group, into a topic Session: joined to the most similar existing
//     session (cosine of term counts at or above Options.JoinAt), else a new
//     one, with an extractive summary and keywords. The move happens in the
//     transaction that appends the turn, so no turn is ever dropped: each is
//     in the queue or in exactly one session. A session's heat is MemoryOS's
//     H = visits + interactions + exp(-Δt/τ) (Heat);
//   - long-term: a session whose heat reaches Options.HeatAt is due for
//     consolidation (Due): the caller extracts memories from its turns and
//     updates the cube's Profile (stable facts and preferences about the
//     user) and knowledge, then Consolidated resets its interactions, as
//     MemoryOS does after its analysis.
//
// Extraction jobs (Job) are persisted next to the cube's records so that a
// restart resumes them; Extract* helpers build the JSON schema the served
// model's output is held to (through runtime/grammar), parse and check that
// output, and extract memories without a model. The per-memory change log
// (Change) says what changed a memory, when and why; Expiry indexes the
// memories that expire.
//
// Every record lives in the text tier's Backend (textmem.Backend) under
// the key prefix "c/" of its cube, so a cube's delete removes it and a
// shared PostgreSQL store shares it. The turns' texts themselves are
// textmem memories of Kind "turn" (MemoryOS's pages): the text tier indexes
// and retrieves them like any memory; this package keeps their order and
// grouping.
//
// A Store is safe for concurrent use; writes to one cube are serialised by
// the Backend's transactions (retried on conflict).
package convmem
