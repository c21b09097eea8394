package memosrt

import (
	"context"
	"errors"
	"fmt"

	"github.com/memosrt/memosrt/conversation"
	"github.com/memosrt/memosrt/convmem"
	"github.com/memosrt/memosrt/internal/gate"
	"github.com/memosrt/memosrt/pipeline/record"
	"github.com/memosrt/memosrt/runtime/slots"
	"github.com/memosrt/memosrt/scheduler"
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

// ErrUndoChanged is returned by UndoJob when every memory the job wrote
// changed since: nothing is undone, the job stays done
// (conversation.ErrUndoChanged).
var ErrUndoChanged = conversation.ErrUndoChanged

// startConversations opens the conversation memory and starts its job
// runner, which resumes the jobs a previous run left queued or running,
// and makes the Recorder of what answers leave in it (o.rec).
func (o *OS) startConversations(ctx context.Context) error {
	co := o.opts.Conversations
	co.Now = o.opts.Clock.Now
	h := conversation.Hooks{
		AddMemory:     o.addMemory,
		ContextTokens: o.p.ContextTokens,
		Used:          func(cube string, ids []string) { o.p.AddUses(scheduler.Uses(cube, ids, 1, 1)) },
		Rate:          func(cube string, ids []string, delta int) { o.p.AddUses(scheduler.Uses(cube, ids, delta, delta)) },
		Kick:          o.p.Kick,
		Go:            o.g.Go,
		JobStarted: func(ctx context.Context, j convmem.Job) {
			if h := o.jobStarted; h != nil {
				h(ctx, j)
			}
		},
	}
	if o.opts.Model != "" || o.opts.Upstream != nil {
		h.Generate = o.extractionText
	}
	var err error
	o.conv, err = conversation.Open(ctx, o.mem, conversation.Options{Store: co, Logger: o.log, Base: o.g.Base(),
		NoExtract: o.opts.NoExtract, Hooks: h})
	if err != nil {
		return err
	}
	o.rec = record.New(o.conv, o.cubes, record.Options{NoRecord: o.opts.NoRecord, Clock: o.opts.Clock, Logger: o.log})
	return nil
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
	res, err := gate.Call(o.g, ctx, func(ctx context.Context) (*Response, error) {
		return o.p.GenerateBackground(ctx, Request{Prompt: g.Prompt, Raw: true, Sampling: Sampling{Grammar: g.Grammar},
			Format: g.Format, NumPredict: g.MaxTokens, NoPersist: true, NoUsage: true, Record: RecordNone})
	})
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

// MaxMessages bounds the messages of one AddMessages call: the turns are
// recorded before it returns.
const MaxMessages = conversation.MaxMessages

// MessagesOptions configure AddMessages.
type MessagesOptions struct {
	// NoExtract records the turns without an extraction job (Mem0's
	// infer=false).
	NoExtract bool
	// AssistantCube is an assistant's cube (Cube.Assistant) the
	// extraction writes the procedures it finds to; the other memories go
	// to the cube. "" writes everything to the cube. Errors:
	// ErrUnknownCube, or a *FieldError for a cube not marked assistant.
	AssistantCube string
}

// AddMessages records msgs as turns of cube (each user message with the
// assistant message after it; system and tool messages are left out) and
// queues one extraction job over them, as Mem0's add(messages) and MemOS's
// MemReader do; it returns at once with the stored job (state queued) and
// the turns. The job runs in the background: see Job, Jobs and UndoJob.
// The cube is created if needed. Errors: *FieldError for no messages, no
// message with text, or a bad role; textmem.ErrBadCube; storage errors.
func (o *OS) AddMessages(ctx context.Context, cube string, msgs []Message, mo MessagesOptions) (convmem.Job, []convmem.Turn, error) {
	if err := o.g.Enter(); err != nil {
		return convmem.Job{}, nil, err
	}
	defer o.g.Leave()
	turns, err := conversation.TurnsOf(msgs)
	if err != nil {
		return convmem.Job{}, nil, err
	}
	if a := mo.AssistantCube; a != "" {
		rec, err := o.cubes.Get(ctx, a)
		if err != nil {
			return convmem.Job{}, nil, err
		}
		if !rec.Assistant {
			return convmem.Job{}, nil, &FieldError{Field: "assistant_cube", Msg: fmt.Sprintf("cube %q is not an assistant's (create it with assistant true)", a)}
		}
		for i := range turns {
			turns[i].AssistantCube = a
		}
	}
	if err := o.cubes.Ensure(ctx, cube); err != nil {
		return convmem.Job{}, nil, err
	}
	return o.conv.AddTurns(ctx, cube, turns, !mo.NoExtract)
}

// Job returns an extraction job of cube. Errors: convmem.ErrNotFound.
func (o *OS) Job(ctx context.Context, cube, id string) (convmem.Job, error) {
	return gate.Call(o.g, ctx, func(ctx context.Context) (convmem.Job, error) { return o.conv.Store().Job(ctx, cube, id) })
}

// Jobs returns cube's extraction jobs, oldest first.
func (o *OS) Jobs(ctx context.Context, cube string) ([]convmem.Job, error) {
	return gate.Call(o.g, ctx, func(ctx context.Context) ([]convmem.Job, error) { return o.conv.Store().Jobs(ctx, cube) })
}

// UndoJob undoes a done extraction job: memories it added are deleted and
// memories it superseded get their previous text back as a new version,
// each only while it is still at the version the job left (a memory
// changed since is kept, and listed in the job's Dropped); the job's state
// becomes undone. Errors: convmem.ErrNotFound, ErrJobState,
// ErrUndoChanged (every memory the job wrote changed since: nothing undone).
func (o *OS) UndoJob(ctx context.Context, cube, id string) (convmem.Job, error) {
	return gate.Call(o.g, ctx, func(ctx context.Context) (convmem.Job, error) { return o.conv.UndoJob(ctx, cube, id) })
}

// Profile returns cube's long-term profile: facts about the user, the
// user's preferences and knowledge, written by consolidated sessions. Its
// Preferences also list every other memory of the cube of Kind
// "preference" (an app's add, an extraction from added messages, a
// feedback's correction), oldest first after the consolidated ones
// (conversation.Manager.Profile).
func (o *OS) Profile(ctx context.Context, cube string) (convmem.Profile, error) {
	return gate.Call(o.g, ctx, func(ctx context.Context) (convmem.Profile, error) {
		if err := o.p.CheckCube(ctx, cube); err != nil {
			return convmem.Profile{}, err
		}
		return o.conv.Profile(ctx, cube)
	})
}

// ShortTerm returns cube's short-term queue of turns, oldest first.
func (o *OS) ShortTerm(ctx context.Context, cube string) ([]convmem.Turn, error) {
	return gate.Call(o.g, ctx, func(ctx context.Context) ([]convmem.Turn, error) { return o.conv.Store().ShortTerm(ctx, cube) })
}

// Sessions returns cube's mid-term sessions with their heat, oldest first.
func (o *OS) Sessions(ctx context.Context, cube string) ([]convmem.Session, error) {
	return gate.Call(o.g, ctx, func(ctx context.Context) ([]convmem.Session, error) { return o.conv.Store().Sessions(ctx, cube) })
}

// MemoryLog returns memory id's change log, oldest first: what changed it,
// when and why.
func (o *OS) MemoryLog(ctx context.Context, cube, id string) ([]convmem.Change, error) {
	return gate.Call(o.g, ctx, func(ctx context.Context) ([]convmem.Change, error) { return o.conv.Store().Changes(ctx, cube, id) })
}
