package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckListen(t *testing.T) {
	for _, c := range []struct {
		addr, token string
		insecure    bool
		ok          bool
	}{
		{"127.0.0.1:11435", "", false, true},
		{"[::1]:11435", "", false, true},
		{"localhost:11435", "", false, true},
		{"0.0.0.0:11435", "", false, false},
		{":11435", "", false, false},
		{"192.168.1.5:80", "", false, false},
		{"0.0.0.0:11435", "secret", false, true},
		{"0.0.0.0:11435", "", true, true},
		{"nonsense", "", false, false},
	} {
		err := checkListen(c.addr, c.token, c.insecure)
		if (err == nil) != c.ok {
			t.Errorf("checkListen(%q, %q, %v) = %v, want ok=%v", c.addr, c.token, c.insecure, err, c.ok)
		}
	}
}

func TestEmbedFlag(t *testing.T) {
	ctx := context.Background()
	if e, err := embedderFromFlag(ctx, "none", ""); e != nil || err != nil {
		t.Fatalf("none: %v %v", e, err)
	}
	e, err := embedderFromFlag(ctx, "hash:32", "")
	if err != nil || e.Dim() != 32 {
		t.Fatalf("hash:32: %v", err)
	}
	for _, bad := range []string{"hash:x", "word2vec"} {
		if _, err := embedderFromFlag(ctx, bad, ""); err == nil || !strings.Contains(err.Error(), "--embed") {
			t.Errorf("%q: %v", bad, err)
		}
	}
	// the chat model's mean-pooled states are gone as an embedder
	if _, err := embedderFromFlag(ctx, "model", ""); err == nil || !strings.Contains(err.Error(), "--embed-model FILE|NAME") {
		t.Errorf("model: %v", err)
	}
}

// --embed-model is refused beside --embed, and for a file that is not
// there, before any data directory or model is opened.
func TestEmbedModelFlagErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "none.gguf")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--embed", "hash:8", "--embed-model", missing}, "--embed hash:8 and --embed-model " + missing + " both choose the embedder"},
		{[]string{"--embed-model", missing}, "--embed-model: stat " + missing + ": no such file or directory"},
		{[]string{"--embed", "model"}, "--embed model is gone"},
	} {
		db := t.TempDir()
		err := run(context.Background(), append([]string{"serve", "--db", db, "--addr", "127.0.0.1:0"}, c.args...))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.args, err, c.want)
		}
		if ents, _ := os.ReadDir(db); len(ents) != 0 {
			t.Errorf("%q: the data directory holds %d entries", c.args, len(ents))
		}
	}
}

func TestServeNeedsTokenOffLoopback(t *testing.T) {
	err := run(context.Background(), []string{"serve", "--db", t.TempDir(), "--addr", "0.0.0.0:0"})
	if err == nil || !strings.Contains(err.Error(), "--token") {
		t.Fatalf("got %v", err)
	}
}
