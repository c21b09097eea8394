package server

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/ollama/ollama/api"
)

// What memosrt does not serve is refused with a 400 naming the field, as
// Ollama refuses think for a model without thinking; think false and
// logprobs off pass. Model management answers 501 saying what to do.
func TestRefusals(t *testing.T) {
	e := newEnv(t, envConfig{nctx: 512})
	msgs := []map[string]any{{"role": "user", "content": "Hi"}}
	opts := map[string]any{"num_predict": 2}
	for _, c := range []struct {
		path string
		body map[string]any
		want int
		msg  string
	}{
		{"/api/chat", map[string]any{"model": testModel, "messages": msgs, "stream": false, "options": opts, "think": true}, 400, `think: "stories260K" does not support thinking`},
		{"/api/generate", map[string]any{"model": testModel, "prompt": "Hi", "stream": false, "options": opts, "think": "high"}, 400, `think: "stories260K" does not support thinking`},
		{"/api/chat", map[string]any{"model": testModel, "messages": msgs, "stream": false, "options": opts, "think": false}, 200, ""},
		{"/api/chat", map[string]any{"model": testModel, "messages": msgs, "stream": false, "options": opts, "logprobs": true}, 400, "logprobs: log probabilities are not served"},
		{"/api/generate", map[string]any{"model": testModel, "prompt": "Hi", "stream": false, "options": opts, "top_logprobs": 3}, 400, "logprobs"},
		{"/v1/chat/completions", map[string]any{"model": testModel, "messages": msgs, "max_tokens": 2, "logprobs": true, "top_logprobs": 2}, 400, "log probabilities are not served"},
		{"/v1/chat/completions", map[string]any{"model": testModel, "messages": msgs, "max_tokens": 2, "logprobs": false}, 200, ""},
		{"/v1/completions", map[string]any{"model": testModel, "prompt": "Hi", "max_tokens": 2, "logprobs": 2}, 400, "log probabilities are not served"},
		{"/v1/completions", map[string]any{"model": testModel, "prompt": "Hi", "max_tokens": 2, "logprobs": 0}, 200, ""},
		{"/api/pull", map[string]any{"model": "llama3"}, 501, "memosrt does not manage models"},
		{"/api/create", map[string]any{"model": "x", "from": testModel}, 501, "/api/create"},
		{"/api/copy", map[string]any{"source": testModel, "destination": "y"}, 501, "pull, create or copy models with ollama itself"},
	} {
		var out map[string]any
		code := do(t, "POST", e.url()+c.path, c.body, &out)
		msg := ""
		switch v := out["error"].(type) {
		case string:
			msg = v
		case map[string]any:
			msg, _ = v["message"].(string)
		}
		if code != c.want || !strings.Contains(msg, c.msg) {
			t.Errorf("%s %v: %d %q, want %d %q", c.path, c.body, code, msg, c.want, c.msg)
		}
	}
	// through the official client: its error carries the status and text
	err := ollamaClient(t, e.url()).Delete(context.Background(), &api.DeleteRequest{Model: testModel})
	var se api.StatusError
	if !errors.As(err, &se) || se.StatusCode != http.StatusNotImplemented || !strings.Contains(se.ErrorMessage, "/api/delete") {
		t.Fatalf("ollama delete: %v", err)
	}
}
