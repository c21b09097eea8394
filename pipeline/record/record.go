package record

import (
	"cmp"
	"context"
	"log/slog"

	"github.com/memosrt/memosrt/conversation"
	"github.com/memosrt/memosrt/convmem"
	"github.com/memosrt/memosrt/layout"
	"github.com/memosrt/memosrt/pipeline/request"
	"github.com/memosrt/memosrt/scheduler/heat"
	"github.com/memosrt/memosrt/textmem"
)

// Options configure a Recorder. Zero means the default given.
type Options struct {
	// NoRecord keeps no chat turn and no user text in any cube
	// (config.Options.NoRecord); the response log still gets each
	// answer's id and the memories it used, for feedback.
	NoRecord bool
	// Clock stamps the response log entries. Required.
	Clock heat.Clock
	// Logger; nil discards.
	Logger *slog.Logger
}

// Recorder writes answers into the conversation memory.
type Recorder struct {
	conv  *conversation.Manager
	cubes *textmem.CubeRegistry
	opts  Options
	log   *slog.Logger
}

// New returns a Recorder writing to conv; cubes tells which of a chat's
// read cubes is an assistant's (textmem.Cube.Assistant).
func New(conv *conversation.Manager, cubes *textmem.CubeRegistry, opts Options) *Recorder {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Recorder{conv: conv, cubes: cubes, opts: opts, log: log}
}

// Response keeps an answer in its cube's response log (the pipeline's
// OnResponse hook), so that feedback can name it: its id and the memories
// its prompt carried; the user's message too (the last user message of a
// chat, else the prompt) unless Options.NoRecord or the cube's record
// (as the request found it) says NoRecord. A request with
// request.RecordNone leaves nothing, the log entry included (a read-only
// key's chat).
func (r *Recorder) Response(ctx context.Context, req *request.Request, cube textmem.Cube, res *request.Response) {
	if req.Record == request.RecordNone {
		return
	}
	rec := convmem.ResponseRecord{ID: res.ID, Cube: req.Cube, Model: req.Model, Chat: req.Messages != nil,
		PackIDs: res.PackMemoryIDs, RetrievedIDs: res.RetrievedIDs, PreferenceIDs: res.PreferenceIDs, Time: r.opts.Clock.Now().UTC()}
	if !r.opts.NoRecord && !cube.NoRecord {
		rec.User = req.Prompt
		if rec.Chat {
			rec.User = cmp.Or(layout.Query(req.Messages), req.Prompt)
		}
	}
	if err := r.conv.Store().PutResponse(context.WithoutCancel(ctx), rec); err != nil {
		r.log.Warn("response not logged", "cube", req.Cube, "id", res.ID, "err", err)
	}
}

// Chat records an answered chat turn (the pipeline's OnChat hook): the
// last message if it is the user's, and the answer unless req.Record is
// request.RecordUser; nothing without a cube, with request.RecordNone,
// with Options.NoRecord or in a NoRecord cube (its record as the request
// found it).
func (r *Recorder) Chat(ctx context.Context, req *request.Request, cube textmem.Cube, answer string) {
	if req.Cube == "" || req.Record == request.RecordNone || r.opts.NoRecord || cube.NoRecord {
		return
	}
	err := r.conv.RecordChat(context.WithoutCancel(ctx), req.Cube, req.Messages, answer, req.Record == request.RecordUser, r.assistant(ctx, req))
	if err != nil {
		r.log.Warn("turn not recorded", "cube", req.Cube, "err", err)
	}
}

// assistant returns the first of a chat's read cubes whose record marks it
// an assistant's (textmem.Cube.Assistant), "" none (or a record not read,
// or req.NoAssistantWrite).
func (r *Recorder) assistant(ctx context.Context, req *request.Request) string {
	if req.NoAssistantWrite {
		return ""
	}
	for _, c := range req.ReadCubes {
		if rec, err := r.cubes.Get(ctx, c); err == nil && rec.Assistant {
			return c
		}
	}
	return ""
}
