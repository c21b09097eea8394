// Package conversation is the memory conversations write by themselves,
// run over the records of package convmem and the memories of package
// textmem. A chat turn in a cube is recorded after its answer
// (Manager.RecordTurns): convmem queues it short-term, moves overflowing
// turns into topic sessions and says which sessions are hot enough to
// consolidate; the turn's text becomes a textmem memory of Kind KindTurn
// (Manager.Materialize: searchable at once, retrieved into prompts like any
// memory once it left the short-term queue). A hot session, or a batch of
// messages added by the app (Manager.AddTurns), gets an extraction job:
// persisted in convmem, run in the background by one goroutine (the job
// runner), resumed after a restart. The job's memories are extracted by
// the loaded model, its output held to convmem.ExtractSchema, or
// extractively without a model, and stored through the same governance as
// an app's add (Manager.Remember: an identical add is a no-op, a
// contradicted liking is superseded); a session job then updates the
// cube's profile. Every change is logged with what made it and why
// (convmem.Change); Manager.UndoJob reverts a done job from that record.
// Manager.Search merges the cube's best matching sessions into a text-tier
// search; Manager.SweepExpired deletes the memories whose expiry passed.
//
// Main types: Manager (one per data directory, made by Open and stopped by
// Close), Options, and Hooks: what the facade above (package memosrt)
// lends it: its write path for a new memory (the cube's record first),
// generation with the loaded model, the scheduler's usage counter and
// tick, and a way to run background work that its Close waits for. This
// package never imports the facade.
//
// A Manager is safe for concurrent use. Its locks are never nested and
// none is held across a hook call, but feedbackMu: turnMu serialises
// Materialize (every cube), dueMu guards the cubes whose background turn
// write is due, jobMu guards the sessions whose consolidation job is
// queued. feedbackMu serialises Feedback (an answer is rated once); it is
// taken first and held across Feedback's writes (which may take the
// others) and its Rate hook call; nothing Feedback calls calls Feedback. Writes to one
// cube's records are serialised by the text tier's transactions.
package conversation
