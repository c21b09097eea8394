package server

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dgraph-io/ristretto/v2/z"
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

// /metrics reports the heap of Badger's arenas as ristretto registers
// them: an arena of 16 MiB made beside the server's Badger adds exactly
// that, and releasing it takes it back.
func TestBadgerArenaMetric(t *testing.T) {
	e := newEnv(t, envConfig{noEngine: true})
	read := func() float64 {
		t.Helper()
		return readMetric(t, e, "memosrt_badger_arena_bytes")
	}
	// Badger's pool frees one idle arena each 2 s (the open may have
	// pooled one): wait until two readings 2.5 s apart agree
	before := read()
	for range 10 {
		time.Sleep(2500 * time.Millisecond)
		if now := read(); now == before {
			break
		} else {
			before = now
		}
	}
	a := z.NewAllocator(16<<20, "server-test")
	if got := read() - before; got != 16<<20 {
		t.Errorf("with a 16 MiB arena: %.0f bytes more, want %d", got, 16<<20)
	}
	a.Release()
	if got := read(); got != before {
		t.Errorf("after its release: %.0f bytes, want %.0f", got, before)
	}
}
