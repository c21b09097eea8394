package wire

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
)

// Streamer writes a streamed response: NDJSON lines (Ollama, the native
// API) or SSE events (OpenAI), each flushed through
// http.ResponseController. The status (200) and headers go out with the
// first line. A Streamer is used by the request's goroutine only.
type Streamer struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	sse     bool
	started bool
}

// NewStreamer returns a Streamer on w: SSE events when sse, else NDJSON
// lines. Nothing is written until the first Send.
func NewStreamer(w http.ResponseWriter, sse bool) *Streamer {
	return &Streamer{w: w, rc: http.NewResponseController(w), sse: sse}
}

func (st *Streamer) start() {
	if st.started {
		return
	}
	st.started = true
	h := st.w.Header()
	if st.sse {
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
	} else {
		h.Set("Content-Type", "application/x-ndjson")
	}
	h.Set("X-Accel-Buffering", "no")
	st.w.WriteHeader(http.StatusOK)
}

// Send writes v as JSON in one line or event and flushes it. Errors: v
// does not encode, or the write or flush failed (the client is gone).
func (st *Streamer) Send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return st.SendRaw(b)
}

// SendRaw writes b as one line or event ("data: b") as it is and flushes
// it (OpenAI's closing "[DONE]"). Errors: the write or flush failed.
func (st *Streamer) SendRaw(b []byte) error {
	st.start()
	var err error
	if st.sse {
		_, err = fmt.Fprintf(st.w, "data: %s\n\n", b)
	} else {
		b = append(b, '\n')
		_, err = st.w.Write(b)
	}
	if err != nil {
		return err
	}
	return st.rc.Flush()
}

// StreamError reports err of a request whose answer st streams (nil: not
// streamed): as a JSON error response (WriteError) when nothing was sent
// yet, else as a last line {"error": "..."} or event {"error": {"message",
// "type", "code"}}. A client that went away (r's context done) gets
// nothing.
func StreamError(log *slog.Logger, w http.ResponseWriter, r *http.Request, st *Streamer, err error) {
	if r.Context().Err() != nil {
		return
	}
	if st == nil || !st.started {
		WriteError(log, w, r, err)
		return
	}
	if st.sse {
		code, typ := Status(err)
		st.Send(map[string]any{"error": map[string]any{"message": err.Error(), "type": typ, "code": code}})
		return
	}
	st.Send(map[string]string{"error": err.Error()})
}
