package record

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/memosrt/memosrt/conversation"
	"github.com/memosrt/memosrt/convmem"
	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/layout"
	"github.com/memosrt/memosrt/pipeline/request"
	"github.com/memosrt/memosrt/textmem"
)

type fixedClock time.Time

func (c fixedClock) Now() time.Time { return time.Time(c) }

// open opens a conversation memory and a cube registry over a real Badger
// database in t.TempDir(), with an assistant's cube "helper".
func open(t *testing.T) (*conversation.Manager, *textmem.CubeRegistry) {
	t.Helper()
	ctx := context.Background()
	db, err := datadir.Open(datadir.Options{Dir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	mem, err := textmem.OpenBackend(textmem.NewBadgerBackend(db), textmem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	conv, err := conversation.Open(ctx, mem, conversation.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conv.Close()
		if err := errors.Join(mem.Close(), db.Close()); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	cubes, err := textmem.OpenCubes(ctx, mem, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cubes.Create(ctx, textmem.Cube{Name: "helper", Assistant: true}); err != nil {
		t.Fatal(err)
	}
	return conv, cubes
}

// Each case answers one request in a cube of its own and calls both hooks
// as the pipeline does (Response, then Chat for a chat); the cube's
// response log and recorded turns are then exactly what is wanted.
func TestRecorder(t *testing.T) {
	at := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	chat := []layout.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Where does Max run?"}}
	res := &request.Response{ID: "resp_1", PackMemoryIDs: []string{"m1"}, RetrievedIDs: []string{"m2", "m3"}}
	for _, tc := range []struct {
		name     string
		req      request.Request
		cube     textmem.Cube // the cube's record as the request found it
		noRecord bool         // Options.NoRecord
		logged   bool         // a response log entry
		user     string       // its User
		turn     *convmem.Turn
	}{
		{name: "turn", req: request.Request{Messages: chat, ReadCubes: []string{"other", "helper"}}, logged: true, user: "Where does Max run?",
			turn: &convmem.Turn{User: "Where does Max run?", Assistant: "In the park.", AssistantCube: "helper"}},
		{name: "user-only", req: request.Request{Messages: chat, Record: request.RecordUser}, logged: true, user: "Where does Max run?",
			turn: &convmem.Turn{User: "Where does Max run?"}},
		{name: "no-assistant-write", req: request.Request{Messages: chat, ReadCubes: []string{"helper"}, NoAssistantWrite: true},
			logged: true, user: "Where does Max run?", turn: &convmem.Turn{User: "Where does Max run?", Assistant: "In the park."}},
		{name: "record-none", req: request.Request{Messages: chat, Record: request.RecordNone}},
		{name: "cube-no-record", req: request.Request{Messages: chat}, cube: textmem.Cube{NoRecord: true}, logged: true},
		{name: "options-no-record", req: request.Request{Messages: chat}, noRecord: true, logged: true},
		{name: "completion", req: request.Request{Prompt: "Max runs in"}, logged: true, user: "Max runs in"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			conv, cubes := open(t)
			r := New(conv, cubes, Options{NoRecord: tc.noRecord, Clock: fixedClock(at)})
			req := tc.req
			req.Cube = "a"
			tc.cube.Name = "a"
			r.Response(ctx, &req, tc.cube, res)
			if req.Messages != nil {
				r.Chat(ctx, &req, tc.cube, "In the park.")
			}
			log, err := conv.Store().Responses(ctx, "a")
			if err != nil {
				t.Fatal(err)
			}
			if !tc.logged {
				if len(log) != 0 {
					t.Fatalf("response log: %+v, want none", log)
				}
			} else {
				want := convmem.ResponseRecord{ID: "resp_1", Cube: "a", Chat: req.Messages != nil, User: tc.user,
					PackIDs: []string{"m1"}, RetrievedIDs: []string{"m2", "m3"}, Time: at}
				if len(log) != 1 || log[0].ID != want.ID || log[0].Cube != want.Cube || log[0].Chat != want.Chat || log[0].User != want.User ||
					!slices.Equal(log[0].PackIDs, want.PackIDs) || !slices.Equal(log[0].RetrievedIDs, want.RetrievedIDs) || !log[0].Time.Equal(at) {
					t.Fatalf("response log: %+v, want %+v", log, want)
				}
			}
			turns, err := conv.Store().ShortTerm(ctx, "a")
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.turn == nil && len(turns) != 0:
				t.Fatalf("turns: %+v, want none", turns)
			case tc.turn != nil && (len(turns) != 1 || turns[0].User != tc.turn.User || turns[0].Assistant != tc.turn.Assistant ||
				turns[0].AssistantCube != tc.turn.AssistantCube):
				t.Fatalf("turns: %+v, want %+v", turns, *tc.turn)
			}
		})
	}
}
