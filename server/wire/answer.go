package wire

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/memosrt/memosrt/convmem"
)

// WriteError writes err as a JSON error with its status (Status):
// Ollama's {"error": "..."} under /api/ and elsewhere OpenAI's {"error":
// {"message", "type", "param", "code"}} ("param" from Field, "code"
// "queue_full" on a 429). A 503 or 429 carries "Retry-After: 1"; a 5xx
// other than 503 is logged to log as a warning (nil: not logged).
func WriteError(log *slog.Logger, w http.ResponseWriter, r *http.Request, err error) {
	code, typ := Status(err)
	if code >= 500 && code != http.StatusServiceUnavailable && log != nil {
		log.Warn("request failed", "path", r.URL.Path, "status", code, "err", err)
	}
	if code == http.StatusServiceUnavailable || code == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	msg := err.Error()
	if strings.HasPrefix(r.URL.Path, "/api/") {
		WriteJSON(w, code, map[string]string{"error": msg})
		return
	}
	body := map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}
	if f := Field(err); f != "" {
		body["param"] = f
	}
	if code == http.StatusTooManyRequests {
		body["code"] = "queue_full"
	}
	WriteJSON(w, code, map[string]any{"error": body})
}

// WriteJSON writes v as a JSON answer with status code and a newline, with
// Content-Type and Content-Length set; a v that does not encode is
// answered 500 {"error":"encoding response failed"}.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code = http.StatusInternalServerError
		b = []byte(`{"error":"encoding response failed"}`)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Content-Length", fmt.Sprint(len(b)+1))
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}

// Profile is p with empty lists as [] rather than null, as the memory API
// and the MCP tools answer it.
func Profile(p convmem.Profile) convmem.Profile {
	if p.Facts == nil {
		p.Facts = []convmem.ProfileItem{}
	}
	if p.Preferences == nil {
		p.Preferences = []convmem.ProfileItem{}
	}
	if p.Knowledge == nil {
		p.Knowledge = []convmem.ProfileItem{}
	}
	return p
}
