package memosrt

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/memosrt/memosrt/conversation"
	"github.com/memosrt/memosrt/convmem"
	"github.com/memosrt/memosrt/runtime/slots"
	"github.com/memosrt/memosrt/scheduler"
	"github.com/memosrt/memosrt/textmem"
)

// Memory that conversations write by themselves lives in package
// conversation (over the records of package convmem); the OS lends it its
// write path, generation with the served model, the scheduler's usage
// counter and its in-flight tracking, and keeps the methods below, which
// delegate.

// KindTurn is the Kind of the memories that hold recorded chat turns.
const KindTurn = conversation.KindTurn

// SourceShortTerm is the Source of the memory of a turn still in its
// cube's short-term queue: Search finds it, prompts never hold it (the
// conversation carries it); it becomes "dialog:<id>" when the turn moves.
const SourceShortTerm = conversation.SourceShortTerm

// ErrJobState is returned by UndoJob for a job that is not done.
var ErrJobState = conversation.ErrJobState

// startConversations opens the conversation memory and starts its job
// runner, which resumes the jobs a previous run left queued or running.
func (o *OS) startConversations(ctx context.Context) error {
	co := o.opts.Conversations
	co.Now = o.opts.Clock.Now
	h := conversation.Hooks{
		AddMemory:     o.addMemory,
		ContextTokens: o.p.ContextTokens,
		Used: func(cube string, ids []string) {
			uses := make([]scheduler.Use, len(ids))
			for i, id := range ids {
				uses[i] = scheduler.Use{Cube: cube, ID: id, Visits: 1, Interactions: 1}
			}
			o.p.AddUses(uses)
		},
		Kick: o.p.Kick,
		Go: func(f func()) {
			go func() {
				if o.enter() != nil {
					return
				}
				defer o.leave()
				f()
			}()
		},
		JobStarted: func(ctx context.Context, j convmem.Job) {
			if h := o.jobStarted; h != nil {
				h(ctx, j)
			}
		},
	}
	if o.opts.Model != "" || o.up {
		h.Generate = o.extractionText
	}
	var err error
	o.conv, err = conversation.Open(ctx, o.mem, conversation.Options{Store: co, Logger: o.log, Base: o.base,
		NoExtract: o.opts.NoExtract, Hooks: h})
	return err
}

// stopConversations stops the job runner: a running extraction stays
// running in the store, resumed at the next Open.
func (o *OS) stopConversations() {
	if o.conv != nil {
		o.conv.Close()
	}
}

// extractionText runs an extraction job's generation at background
// priority (it takes only an idle slot, and a foreground request takes the
// slot back), without a chat template, a stored pack, usage or a recorded
// turn.
func (o *OS) extractionText(ctx context.Context, g conversation.Generation) (*conversation.Generated, error) {
	if err := o.enter(); err != nil {
		return nil, fmt.Errorf("%w: %w", conversation.ErrClosing, err)
	}
	defer o.leave()
	ctx, done := o.bound(ctx)
	defer done()
	res, err := o.p.GenerateBackground(ctx, Request{Prompt: g.Prompt, Raw: true, Sampling: Sampling{Grammar: g.Grammar},
		Format: g.Format, NumPredict: g.MaxTokens, NoPersist: true, NoUsage: true, Record: RecordNone})
	switch {
	case errors.Is(err, ErrClosed):
		err = fmt.Errorf("%w: %w", conversation.ErrClosing, err)
	case errors.Is(err, slots.ErrNoIdle):
		err = fmt.Errorf("%w: %w", conversation.ErrRetryLater, err)
	}
	if res == nil {
		return nil, err
	}
	return &conversation.Generated{Text: res.Text, Cut: res.DoneReason == "length", Tokens: res.Usage.EvalTokens}, err
}

// recordChat records the turn of a chat request that was answered: the
// last message if it is the user's, and the answer unless req.Record is
// RecordUser, and not in a NoRecord cube (its record as the request found
// it). Sessions made hot by the move are queued for consolidation.
// A failure is logged, never the request's.
func (o *OS) recordChat(ctx context.Context, req *Request, cube Cube, answer string) { // pipeline.Deps.OnChat
	if req.Cube == "" || req.Record == RecordNone || o.opts.NoRecord || cube.NoRecord || len(req.Messages) == 0 {
		return
	}
	last := req.Messages[len(req.Messages)-1]
	if last.Role != "user" || strings.TrimSpace(last.Content) == "" {
		return
	}
	t := convmem.Turn{User: last.Content}
	if req.Record != RecordUser {
		t.Assistant = answer
	}
	if _, err := o.conv.RecordTurns(context.WithoutCancel(ctx), req.Cube, []convmem.Turn{t}); err != nil {
		o.log.Warn("turn not recorded", "cube", req.Cube, "err", err)
	}
}

// MaxMessages bounds the messages of one AddMessages call: the turns are
// recorded before it returns.
const MaxMessages = 1000

// MessagesOptions configure AddMessages.
type MessagesOptions struct {
	// NoExtract records the turns without an extraction job (Mem0's
	// infer=false).
	NoExtract bool
}

// AddMessages records msgs as turns of cube (each user message with the
// assistant message after it; system and tool messages are left out) and
// queues one extraction job over them, as Mem0's add(messages) and MemOS's
// MemReader do; it returns at once with the stored job (state queued) and
// the turns. The job runs in the background: see Job, Jobs and UndoJob.
// The cube is created if needed. Errors: *FieldError for no messages, no
// message with text, or a bad role; textmem.ErrBadCube; storage errors.
func (o *OS) AddMessages(ctx context.Context, cube string, msgs []Message, mo MessagesOptions) (convmem.Job, []convmem.Turn, error) {
	if err := o.enter(); err != nil {
		return convmem.Job{}, nil, err
	}
	defer o.leave()
	if len(msgs) == 0 {
		return convmem.Job{}, nil, badField("messages", "at least one message is required")
	}
	if len(msgs) > MaxMessages {
		return convmem.Job{}, nil, badField("messages", "%d messages, at most %d in one call", len(msgs), MaxMessages)
	}
	var turns []convmem.Turn
	for i, m := range msgs {
		if err := CheckRole(fmt.Sprintf("messages[%d].role", i), m.Role); err != nil {
			return convmem.Job{}, nil, err
		}
		if strings.TrimSpace(m.Content) == "" {
			continue
		}
		switch m.Role {
		case "user":
			turns = append(turns, convmem.Turn{User: m.Content})
		case "assistant":
			if n := len(turns); n > 0 && turns[n-1].Assistant == "" {
				turns[n-1].Assistant = m.Content
			} else {
				turns = append(turns, convmem.Turn{Assistant: m.Content})
			}
		}
	}
	if len(turns) == 0 {
		return convmem.Job{}, nil, badField("messages", "no user or assistant message has text")
	}
	if err := o.ensureCube(ctx, cube); err != nil {
		return convmem.Job{}, nil, err
	}
	return o.conv.AddTurns(ctx, cube, turns, !mo.NoExtract)
}

// ensureCube creates cube's record unless it has one.
func (o *OS) ensureCube(ctx context.Context, cube string) error {
	if !textmem.ValidCube(cube) {
		return fmt.Errorf("%w: %q", textmem.ErrBadCube, cube)
	}
	if _, err := o.cubes.Create(ctx, Cube{Name: cube}); err != nil && !errors.Is(err, ErrCubeExists) {
		return err
	}
	return nil
}

// Job returns an extraction job of cube. Errors: convmem.ErrNotFound.
func (o *OS) Job(ctx context.Context, cube, id string) (convmem.Job, error) {
	if err := o.enter(); err != nil {
		return convmem.Job{}, err
	}
	defer o.leave()
	return o.conv.Store().Job(ctx, cube, id)
}

// Jobs returns cube's extraction jobs, oldest first.
func (o *OS) Jobs(ctx context.Context, cube string) ([]convmem.Job, error) {
	if err := o.enter(); err != nil {
		return nil, err
	}
	defer o.leave()
	return o.conv.Store().Jobs(ctx, cube)
}

// UndoJob undoes a done extraction job: memories it added are deleted and
// memories it superseded get their previous text back as a new version,
// each only while it is still at the version the job left (a memory
// changed since is kept, and listed in the job's Dropped); the job's state
// becomes undone. Errors: convmem.ErrNotFound, ErrJobState.
func (o *OS) UndoJob(ctx context.Context, cube, id string) (convmem.Job, error) {
	if err := o.enter(); err != nil {
		return convmem.Job{}, err
	}
	defer o.leave()
	return o.conv.UndoJob(ctx, cube, id)
}

// Profile returns cube's long-term profile: facts and preferences about
// the user, and knowledge, written by consolidated sessions.
func (o *OS) Profile(ctx context.Context, cube string) (convmem.Profile, error) {
	if err := o.enter(); err != nil {
		return convmem.Profile{}, err
	}
	defer o.leave()
	if err := o.p.CheckCube(ctx, cube); err != nil {
		return convmem.Profile{}, err
	}
	return o.conv.Store().Profile(ctx, cube)
}

// ShortTerm returns cube's short-term queue of turns, oldest first.
func (o *OS) ShortTerm(ctx context.Context, cube string) ([]convmem.Turn, error) {
	if err := o.enter(); err != nil {
		return nil, err
	}
	defer o.leave()
	return o.conv.Store().ShortTerm(ctx, cube)
}

// Sessions returns cube's mid-term sessions with their heat, oldest first.
func (o *OS) Sessions(ctx context.Context, cube string) ([]convmem.Session, error) {
	if err := o.enter(); err != nil {
		return nil, err
	}
	defer o.leave()
	return o.conv.Store().Sessions(ctx, cube)
}

// MemoryLog returns memory id's change log, oldest first: what changed it,
// when and why.
func (o *OS) MemoryLog(ctx context.Context, cube, id string) ([]convmem.Change, error) {
	if err := o.enter(); err != nil {
		return nil, err
	}
	defer o.leave()
	return o.conv.Store().Changes(ctx, cube, id)
}
