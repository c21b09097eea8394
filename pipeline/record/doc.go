// Package record keeps what an answered foreground request leaves in the
// conversation memory (package conversation): the answer's entry in its
// cube's response log, which feedback names by id (Recorder.Response), and
// the chat turn (Recorder.Chat), as Request.Record, Options.NoRecord and
// the cube's record (textmem.Cube.NoRecord) ask. The facade (package
// memosrt) hands a Recorder's methods to the request pipeline as its
// OnResponse and OnChat hooks (pipeline.Deps); a failure to record is
// logged, never the request's.
//
// Main type: Recorder, made by New once the conversation memory is open.
// A Recorder holds no state of its own and is safe for concurrent use.
package record
