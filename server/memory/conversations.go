package memory

import (
	"context"
	"net/http"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/convmem"
	"github.com/memosrt/memosrt/server/wire"
	"github.com/memosrt/memosrt/textmem"
)

// The conversation memory API (package conversation over
// convmem): messages recorded as turns with an extraction job, the jobs,
// the long-term profile, the short-term queue, the mid-term sessions and a
// memory's change log. Each handler translates to one memosrt.OS call; the
// right each needs on the /v1/cubes/{cube}/ path (Register) is checked by
// the server before it runs, as for every cube route.

// wireMessage is one message of POST /v1/cubes/{cube}/messages.
type wireMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type messagesRequest struct {
	Messages []wireMessage `json:"messages"`
	// Infer queues an extraction job over the turns; absent means true
	// (Mem0's infer).
	Infer *bool `json:"infer"`
	// AssistantCube is an assistant's cube the extraction writes the
	// procedures it finds to (memosrt.MessagesOptions.AssistantCube); the
	// caller needs write on it.
	AssistantCube string `json:"assistant_cube"`
}

// handleMessagesAdd answers POST /v1/cubes/{cube}/messages (OS.AddMessages;
// the cube is created if needed): 202 {"job", "turns"}, the job queued; with
// "infer": false, 200 {"turns"} and no job.
func (a *API) handleMessagesAdd(w http.ResponseWriter, r *http.Request) {
	var req messagesRequest
	cube, err := a.pathCubeName(r)
	if err == nil {
		err = wire.DecodeStrict(r, &req)
	}
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	msgs := make([]memosrt.Message, len(req.Messages))
	for i, m := range req.Messages {
		msgs[i] = memosrt.Message{Role: m.Role, Content: m.Content}
	}
	noExtract := req.Infer != nil && !*req.Infer
	if req.AssistantCube != "" {
		if !textmem.ValidCube(req.AssistantCube) {
			err = wire.BadField("assistant_cube", "%q: %v", req.AssistantCube, textmem.ErrBadCube)
		} else {
			err = wire.Allow(r.Context(), a.os, req.AssistantCube, memosrt.KeyWrite)
		}
	}
	var job convmem.Job
	var turns []convmem.Turn
	if err == nil {
		job, turns, err = a.os.AddMessages(r.Context(), cube, msgs, memosrt.MessagesOptions{NoExtract: noExtract, AssistantCube: req.AssistantCube})
	}
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	if turns == nil {
		turns = []convmem.Turn{}
	}
	if noExtract {
		wire.WriteJSON(w, http.StatusOK, map[string]any{"turns": turns})
		return
	}
	wire.WriteJSON(w, http.StatusAccepted, map[string]any{"job": job, "turns": turns})
}

// handleJobs answers GET /v1/cubes/{cube}/jobs: {"jobs"}, oldest first.
func (a *API) handleJobs(w http.ResponseWriter, r *http.Request) {
	answerCube(a, w, r, listed("jobs", a.os.Jobs))
}

// handleJob answers GET /v1/cubes/{cube}/jobs/{id}: the job, 404 for an
// unknown one.
func (a *API) handleJob(w http.ResponseWriter, r *http.Request) {
	answerCube(a, w, r, func(ctx context.Context, cube string) (convmem.Job, error) {
		return a.os.Job(ctx, cube, r.PathValue("id"))
	})
}

// handleJobUndo answers POST /v1/cubes/{cube}/jobs/{id}/undo (OS.UndoJob):
// the undone job; 409 for a job that is not done, 404 for an unknown one.
func (a *API) handleJobUndo(w http.ResponseWriter, r *http.Request) {
	answerCube(a, w, r, func(ctx context.Context, cube string) (convmem.Job, error) {
		return a.os.UndoJob(ctx, cube, r.PathValue("id"))
	})
}

// handleProfile answers GET /v1/cubes/{cube}/profile: the cube's long-term
// profile (convmem.Profile).
func (a *API) handleProfile(w http.ResponseWriter, r *http.Request) {
	answerCube(a, w, r, func(ctx context.Context, cube string) (convmem.Profile, error) {
		p, err := a.os.Profile(ctx, cube)
		return wire.Profile(p), err
	})
}

// handleTurns answers GET /v1/cubes/{cube}/turns: {"turns"}, the
// short-term queue, oldest first.
func (a *API) handleTurns(w http.ResponseWriter, r *http.Request) {
	answerCube(a, w, r, listed("turns", a.os.ShortTerm))
}

// handleSessions answers GET /v1/cubes/{cube}/sessions: {"sessions"}, the
// mid-term sessions with their heat, oldest first.
func (a *API) handleSessions(w http.ResponseWriter, r *http.Request) {
	answerCube(a, w, r, listed("sessions", a.os.Sessions))
}

// handleMemoryLog answers GET /v1/cubes/{cube}/memories/{id}/log:
// {"changes"}, the memory's change log, oldest first (a deleted memory
// keeps its log).
func (a *API) handleMemoryLog(w http.ResponseWriter, r *http.Request) {
	answerCube(a, w, r, listed("changes", func(ctx context.Context, cube string) ([]convmem.Change, error) {
		return a.os.MemoryLog(ctx, cube, r.PathValue("id"))
	}))
}

// answerCube answers a request on the path's cube with get's value as JSON
// (200), or with get's or the cube check's error.
func answerCube[T any](a *API, w http.ResponseWriter, r *http.Request, get func(ctx context.Context, cube string) (T, error)) {
	rec, err := a.pathCube(r)
	var v T
	if err == nil {
		v, err = get(r.Context(), rec.Name)
	}
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, v)
}

// listed wraps a cube's list as {key: list}, an empty list as [] rather
// than null.
func listed[T any](key string, list func(ctx context.Context, cube string) ([]T, error)) func(context.Context, string) (map[string]any, error) {
	return func(ctx context.Context, cube string) (map[string]any, error) {
		l, err := list(ctx, cube)
		if l == nil {
			l = []T{}
		}
		return map[string]any{key: l}, err
	}
}

// handleFeedback answers POST /v1/cubes/{cube}/feedback (OS.Feedback):
// the body is a memosrt.Feedback ({"response_id", "correction",
// "rating", "stars"}); 200 with the memosrt.FeedbackResult; 400 naming
// the field for feedback that says nothing or a rating out of range (0
// given included), 404 for an unknown cube or response, 409 for a
// conflict (memosrt.ErrFeedbackConflict), 413 naming correction for one
// too large to store.
func (a *API) handleFeedback(w http.ResponseWriter, r *http.Request) {
	// Rating and Stars as pointers: a rating of 0 given is refused, where
	// memosrt.Feedback's 0 means none
	var in struct {
		memosrt.Feedback
		Rating *int `json:"rating"`
		Stars  *int `json:"stars"`
	}
	rec, err := a.pathCube(r)
	if err == nil {
		err = wire.DecodeStrict(r, &in)
	}
	var f memosrt.Feedback
	if err == nil {
		f, err = wire.Feedback(in.Feedback, in.Rating, in.Stars)
	}
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	res, err := a.os.Feedback(r.Context(), rec.Name, f)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, res)
}

// handleResponses answers GET /v1/cubes/{cube}/responses: {"responses"},
// the cube's response log (memosrt.ResponseRecord), oldest first.
func (a *API) handleResponses(w http.ResponseWriter, r *http.Request) {
	answerCube(a, w, r, listed("responses", a.os.Responses))
}
