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
