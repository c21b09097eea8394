// Package recall measures how well the text tier finds the evidence of
// questions about long conversations, on the LoCoMo benchmark (Maharana et
// al., "Evaluating Very Long-Term Conversational Memory of LLM Agents", ACL
// 2024; data format of github.com/snap-research/locomo data/locomo10.json).
//
// Run stores every dialog turn of each conversation as a textmem memory
// (text "<session date> <speaker>: <text> [image: <caption>]", Kind
// "dialog", Source the session, EventTime the session date) in one cube per
// conversation, asks every question with textmem.DefaultQuery, and reports
// evidence recall@k per question category and overall, next to a plain
// BM25 baseline over the same turns.
//
// ModeSessions (Options.Mode) measures the memory that chats write by
// themselves (issue 17) on the same data: for each conversation a
// memosrt.OS on a small model (Options.Model) gets every turn, in order,
// as a chat request with the same text as above (Record RecordUser: the
// turn is recorded, the answer discarded; the OS's clock at the session
// date plus the turn's index in seconds, so each turn's event time is its
// own), then each question goes to OS.Search (text hits reranked with the
// cube's sessions), one search per k. It reports that recall@k next to
// the flat store's, and per conversation the short-term queue's length and
// where every fed turn went (Conversation: each in the queue or one
// session, exactly once). Feeding is chat requests on the engine: minutes,
// not seconds.
//
// recall@k of one question is the fraction of its distinct evidence turns
// found among the first k hits; the reported recall@k is the mean over the
// questions of a category (or all questions), in percent. Evidence ids that
// are malformed (not "D<session>:<turn>") or name no turn are skipped and
// counted in Report.SkippedEvidence; a question left without evidence is not
// scored.
//
// Run is safe for concurrent use; each call uses its own temporary Badger
// databases.
package recall
