package conversation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"unicode"
	"unicode/utf8"

	"github.com/memosrt/memosrt/convmem"
	"github.com/memosrt/memosrt/errkind"
	"github.com/memosrt/memosrt/textmem"
)

// ErrBadFeedback is returned by Feedback for feedback that says nothing
// (no correction, no rating) or a rating out of range.
var ErrBadFeedback = errkind.New(errkind.Invalid, "memosrt: bad feedback")

// ErrFeedbackConflict is returned by Feedback for feedback at odds with
// what the cube holds now: a rating of an answer already rated, a
// correction of a memory changed since the answer used it. Nothing is
// written.
var ErrFeedbackConflict = errkind.New(errkind.Conflict, "memosrt: feedback conflict")

// fieldError is an error of Feedback about one field of its Feedback
// (correction, rating, stars): its text is err's, its status err's, and
// errors.As finds an *errkind.FieldError naming the field (a server's
// "param").
type fieldError struct {
	field string
	err   error
}

func (e *fieldError) Error() string { return e.err.Error() }
func (e *fieldError) Unwrap() []error {
	return []error{e.err, &errkind.FieldError{Field: e.field, Msg: e.err.Error()}}
}

// badFeedback returns ErrBadFeedback about field, format saying why.
func badFeedback(field, format string, args ...any) error {
	return &fieldError{field: field, err: fmt.Errorf("%w: "+format, append([]any{ErrBadFeedback}, args...)...)}
}

// Feedback is feedback on one answer in a cube: a correction in plain
// words, a rating, or both.
type Feedback struct {
	// ResponseID names the answer (Response.ID); "" is the cube's latest.
	ResponseID string `json:"response_id,omitempty"`
	// Correction states what is true instead, in plain words ("no, my dog
	// is Rex"); a leading "no", "actually", "wrong", ... is dropped
	// (convmem.CorrectionText).
	Correction string `json:"correction,omitempty"`
	// Rating is -1 (a bad answer) or +1 (a good one); 0 none.
	Rating int `json:"rating,omitempty"`
	// Stars is a rating of 1 to 5: 1 and 2 count as -1, 3 as nothing, 4
	// and 5 as +1; 0 none. At most one of Rating and Stars.
	Stars int `json:"stars,omitempty"`
}

// Feedback actions (FeedbackResult.Action).
const (
	FeedbackSuperseded = "superseded" // the contradicted memory took the correction as its next version
	FeedbackAdded      = "added"      // no used memory matched: the correction is a new memory
	FeedbackSame       = "same"       // the cube already holds the corrected statement: nothing stored
	FeedbackRated      = "rated"      // a rating alone: heat changed, no memory written
)

// FeedbackResult says what Feedback did.
type FeedbackResult struct {
	// Action is one of the Feedback* actions.
	Action string `json:"action"`
	// ResponseID is the answer the feedback was on.
	ResponseID string `json:"response_id"`
	// MemoryID is the memory written (superseded, added or same); "" for
	// rated.
	MemoryID string `json:"memory_id,omitempty"`
	// Version is MemoryID's version now; PreviousVersion and PreviousText
	// its superseded version's (superseded only).
	Version         int    `json:"version,omitempty"`
	PreviousVersion int    `json:"previous_version,omitempty"`
	PreviousText    string `json:"previous_text,omitempty"`
	// Match is the rule that found the contradicted memory
	// (convmem.Match*), superseded only.
	Match string `json:"match,omitempty"`
	// JobID is the feedback's job (a done convmem.Job, By "feedback"):
	// UndoJob on it reverts the memory write; "" when nothing was written.
	JobID string `json:"job_id,omitempty"`
	// HeatDelta is the change of visits and interactions counted towards
	// each memory of Rated: -1, +1 or 0 (a change, not a heat).
	HeatDelta int      `json:"heat_delta"`
	Rated     []string `json:"rated_memory_ids"`
	// Note says what was done, in words.
	Note string `json:"note"`
}

// Feedback applies f to cube's answer f.ResponseID (its latest when ""):
// a correction is matched against the memories that answer used, its
// recorded chat turns (KindTurn) left out (convmem.MatchCorrection); the matched one takes the correction as its
// next version (Patch: its old text stays in its history, the change log
// says why, the pack holding it is recomputed at the next tick), or,
// without a match, the correction is stored as a new memory (Remember).
// Either way the write is recorded as a done job (By "feedback") that
// UndoJob reverts. The used memories other than the corrected one get
// the rating's heat change (Hooks.Rate): f.Rating or f.Stars, or -1 for a
// correction without a rating (they misled the answer). Heat changes are
// not undone. An answer is rated once (its log record keeps Rated): a
// later rating or stars is refused, and a later correction moves no heat.
//
// Errors: ErrBadFeedback (no correction and no rating, a rating out of
// range, a correction of nothing but "no"); ErrFeedbackConflict for a
// rating or stars of an answer already rated, or a correction whose
// matched memory changed since the answer (its Updated after the
// response's Time): nothing written; convmem.ErrNotFound for a
// response the cube's log does not hold (or no response at all when
// f.ResponseID is ""); textmem's write errors (textmem.ErrTooLarge, ...);
// storage errors.
func (m *Manager) Feedback(ctx context.Context, cube string, f Feedback) (FeedbackResult, error) {
	m.feedbackMu.Lock() // the record's Rated is read and written as one step
	defer m.feedbackMu.Unlock()
	delta, err := feedbackDelta(f)
	if err != nil {
		return FeedbackResult{}, err
	}
	text := convmem.CorrectionText(f.Correction)
	if f.Correction != "" && text == "" {
		return FeedbackResult{}, badFeedback("correction", "correction %q states nothing after its leading words", f.Correction)
	}
	rec, err := m.store.Response(ctx, cube, f.ResponseID)
	if errors.Is(err, convmem.ErrNotFound) {
		if f.ResponseID == "" {
			return FeedbackResult{}, fmt.Errorf("%w: cube %q has no recorded response", convmem.ErrNotFound, cube)
		}
		return FeedbackResult{}, fmt.Errorf("%w: response %q in cube %q (the log keeps the last %d)", convmem.ErrNotFound, f.ResponseID, cube, convmem.MaxResponses)
	}
	if err != nil {
		return FeedbackResult{}, err
	}
	if rec.Rated && (f.Rating != 0 || f.Stars != 0) {
		return FeedbackResult{}, fmt.Errorf("%w: response %s is already rated (an answer is rated once)", ErrFeedbackConflict, rec.ID)
	}
	res := FeedbackResult{ResponseID: rec.ID, Action: FeedbackRated, Rated: []string{}}
	var used []textmem.Memory
	for _, id := range rec.Used() {
		mem, err := m.mem.Get(ctx, cube, id)
		if errors.Is(err, textmem.ErrNotFound) {
			continue // deleted since
		}
		if err != nil {
			return res, err
		}
		used = append(used, mem)
	}
	if text != "" {
		if delta == 0 && f.Rating == 0 && f.Stars == 0 && !rec.Rated {
			delta = -1
		}
		if err := m.correct(ctx, cube, rec, text, used, &res); err != nil {
			return res, err
		}
	} else {
		res.Note = "no memory written"
	}
	if f.Rating != 0 || f.Stars != 0 || delta != 0 {
		// the answer is rated now: the record says so before any heat moves
		rec.Rated = true
		if err := m.store.PutResponse(ctx, rec); err != nil {
			return res, err
		}
	}
	if delta != 0 {
		for _, mem := range used {
			if mem.ID != res.MemoryID || res.Action != FeedbackSuperseded {
				res.Rated = append(res.Rated, mem.ID)
			}
		}
		if len(res.Rated) > 0 && m.hooks.Rate != nil {
			m.hooks.Rate(cube, res.Rated, delta)
			res.HeatDelta = delta
		} else {
			res.Rated = []string{}
		}
	}
	return res, nil
}

// correct writes correction text for answer rec, which used used: the
// superseding of the matched memory, else a new memory; the write is
// recorded as a done feedback job.
func (m *Manager) correct(ctx context.Context, cube string, rec convmem.ResponseRecord, text string, used []textmem.Memory, res *FeedbackResult) error {
	now := m.now().UTC()
	j := m.store.NewJob(cube, nil, "")
	j.By, j.Response, j.State, j.Started, j.Finished = "feedback", rec.ID, convmem.JobDone, now, now
	by := "feedback:" + j.ID
	// a recorded chat turn is what was said, not a statement to correct
	stated := slices.DeleteFunc(slices.Clone(used), func(u textmem.Memory) bool { return u.Kind == KindTurn })
	texts := make([]string, len(stated))
	for i, u := range stated {
		texts[i] = u.Text
	}
	i, how := convmem.MatchCorrection(text, texts, m.store.Options().Analyzer)
	var jr convmem.JobResult
	if i >= 0 {
		old := stated[i]
		if old.Updated.After(rec.Time) {
			// the answer saw an older text: superseding the current one
			// would lose an edit made since
			return fmt.Errorf("%w: memory %s changed since response %s used it (now version %d, %q): nothing written",
				ErrFeedbackConflict, old.ID, rec.ID, old.Version, old.Text)
		}
		text = capitalLike(text, old.Text)
		cur, err := m.Patch(ctx, cube, old.ID, textmem.Patch{Text: &text, Source: &by}, convmem.Change{Op: convmem.OpSupersede, By: by,
			Why: fmt.Sprintf("feedback on response %s corrects version %d: %q", rec.ID, old.Version, old.Text)})
		if errors.Is(err, textmem.ErrTooLarge) {
			err = &fieldError{field: "correction", err: err}
		}
		if err != nil {
			return err
		}
		jr = convmem.JobResult{MemoryID: cur.ID, Op: convmem.OpSupersede, Text: cur.Text, Type: cur.Kind, Version: cur.Version,
			PrevText: old.Text, PrevKind: old.Kind, PrevSource: old.Source, PrevVersion: old.Version}
		*res = FeedbackResult{Action: FeedbackSuperseded, ResponseID: rec.ID, MemoryID: cur.ID, Version: cur.Version,
			PreviousVersion: old.Version, PreviousText: old.Text, Match: how,
			Note: fmt.Sprintf("memory %s superseded (%s match): version %d %q replaced by %q", cur.ID, how, old.Version, old.Text, cur.Text)}
	} else {
		got, r, err := m.Remember(ctx, cube, textmem.Memory{Text: text, Kind: convmem.Classify(text), Source: by}, by,
			"feedback on response "+rec.ID+": no memory it used matched the correction")
		if errors.Is(err, textmem.ErrTooLarge) {
			err = &fieldError{field: "correction", err: err}
		}
		if err != nil {
			return err
		}
		jr = r
		*res = FeedbackResult{Action: FeedbackAdded, ResponseID: rec.ID, MemoryID: got.ID, Version: got.Version,
			Note: fmt.Sprintf("no memory the answer used matched the correction: added as memory %s", got.ID)}
		switch r.Op {
		case convmem.OpSame:
			res.Action, res.Note = FeedbackSame, fmt.Sprintf("the cube already holds the correction as memory %s: nothing stored", got.ID)
		case convmem.OpSupersede:
			res.Action, res.PreviousVersion, res.PreviousText, res.Match = FeedbackSuperseded, r.PrevVersion, r.PrevText, convmem.MatchLiking
			res.Note = fmt.Sprintf("memory %s superseded (a contradicted liking in the cube): %q replaced by %q", got.ID, r.PrevText, got.Text)
		}
	}
	res.Rated = []string{}
	if jr.Op == convmem.OpSame {
		return nil // nothing written: no job to undo
	}
	j.Results = []convmem.JobResult{jr}
	if err := m.store.PutJob(ctx, j); err != nil {
		return err
	}
	res.JobID = j.ID
	return nil
}

// capitalLike returns text with its first letter upper-case when the
// first letter of like is (a correction of "My dog is Max." written "no,
// my dog is Rex" is stored "My dog is Rex"); else text as written.
func capitalLike(text, like string) string {
	l, _ := utf8.DecodeRuneInString(like)
	r, n := utf8.DecodeRuneInString(text)
	if !unicode.IsUpper(l) || !unicode.IsLower(r) {
		return text
	}
	return string(unicode.ToUpper(r)) + text[n:]
}

// feedbackDelta is f's heat change (-1, 0 or +1), or ErrBadFeedback.
func feedbackDelta(f Feedback) (int, error) {
	switch {
	case f.Rating != 0 && f.Stars != 0:
		return 0, badFeedback("stars", "rating %d and stars %d: give one", f.Rating, f.Stars)
	case !slices.Contains([]int{-1, 0, 1}, f.Rating):
		return 0, badFeedback("rating", "rating %d: want -1 or 1", f.Rating)
	case f.Stars < 0 || f.Stars > 5:
		return 0, badFeedback("stars", "stars %d: want 1 to 5", f.Stars)
	case f.Rating == 0 && f.Stars == 0 && f.Correction == "":
		return 0, badFeedback("correction", "give a correction, a rating or stars")
	case f.Stars != 0:
		return []int{-1, -1, 0, 1, 1}[f.Stars-1], nil
	}
	return f.Rating, nil
}
