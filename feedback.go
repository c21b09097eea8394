package memosrt

import (
	"context"
	"fmt"

	"github.com/memosrt/memosrt/conversation"
	"github.com/memosrt/memosrt/convmem"
	"github.com/memosrt/memosrt/internal/gate"
)

type (
	// Feedback is feedback on one answer in a cube: a correction in plain
	// words, a rating (-1/+1) or stars (1..5) (conversation.Feedback).
	Feedback = conversation.Feedback
	// FeedbackResult says what OS.Feedback did (conversation.FeedbackResult).
	FeedbackResult = conversation.FeedbackResult
	// ResponseRecord is one answer in its cube's response log.
	ResponseRecord = convmem.ResponseRecord
)

// Feedback actions (FeedbackResult.Action).
const (
	FeedbackSuperseded = conversation.FeedbackSuperseded
	FeedbackAdded      = conversation.FeedbackAdded
	FeedbackSame       = conversation.FeedbackSame
	FeedbackRated      = conversation.FeedbackRated
)

// ErrBadFeedback is returned by Feedback for feedback with no correction
// and no rating, or a rating out of range.
var ErrBadFeedback = conversation.ErrBadFeedback

// ErrFeedbackConflict is returned by Feedback for a rating of an answer
// already rated, or a correction of a memory changed since the answer
// used it (conversation.ErrFeedbackConflict): nothing is written.
var ErrFeedbackConflict = conversation.ErrFeedbackConflict

// Feedback applies f to an answer in cube (f.ResponseID, or the cube's
// latest): a correction supersedes the memory of that answer it
// contradicts (its old text stays in History, the change log says why,
// the pack holding it is recomputed at the next tick) or, when none
// matches, is added as a new memory; the write is a done job that UndoJob
// reverts. A rating (or a correction without one: -1) moves the heat of
// the other memories the answer used. See conversation.Manager.Feedback.
// Errors: ErrBadFeedback (no correction and no rating, a rating out of
// range, an empty cube name), ErrFeedbackConflict (a second rating of an
// answer; a correction of a memory changed since the answer used it),
// ErrUnknownCube, convmem.ErrNotFound for a
// response the cube's log does not hold; textmem's write errors, storage
// errors.
func (o *OS) Feedback(ctx context.Context, cube string, f Feedback) (FeedbackResult, error) {
	return gate.Call(o.g, ctx, func(ctx context.Context) (FeedbackResult, error) {
		if cube == "" {
			return FeedbackResult{}, fmt.Errorf("%w: no cube", ErrBadFeedback)
		}
		if err := o.p.CheckCube(ctx, cube); err != nil {
			return FeedbackResult{}, err
		}
		return o.conv.Feedback(ctx, cube, f)
	})
}

// Responses returns cube's response log, oldest first: its last
// convmem.MaxResponses answers with the memories each used.
func (o *OS) Responses(ctx context.Context, cube string) ([]ResponseRecord, error) {
	return gate.Call(o.g, ctx, func(ctx context.Context) ([]ResponseRecord, error) {
		if err := o.p.CheckCube(ctx, cube); err != nil {
			return nil, err
		}
		return o.conv.Store().Responses(ctx, cube)
	})
}
