package server

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// /metrics reports the text tier's in-memory index: the memories of the
// cubes in use, exactly, and an estimate of its heap that follows them.
func TestTextIndexMetrics(t *testing.T) {
	e := newEnv(t, envConfig{noEngine: true})
	read := func() string {
		t.Helper()
		resp, err := http.Get(e.url() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return grepLines(string(b), "memosrt_text_index_") + "\n"
	}
	if m := read(); !strings.Contains(m, "memosrt_text_index_memories 0\n") || !strings.Contains(m, "memosrt_text_index_bytes 0\n") {
		t.Fatalf("before any memory:\n%s", m)
	}
	for _, text := range []string{"Lily has a dog named Max.", "Max is brown.", "The office is in Lyon."} {
		if code := do(t, "POST", e.url()+"/v1/cubes/alice/memories", map[string]string{"text": text}, nil); code != http.StatusCreated {
			t.Fatalf("add: %d", code)
		}
	}
	m := read()
	if !strings.Contains(m, "memosrt_text_index_memories 3\n") || strings.Contains(m, "memosrt_text_index_bytes 0\n") {
		t.Fatalf("after 3 memories:\n%s", m)
	}
}
