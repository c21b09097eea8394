package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memosrt/memosrt"
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

func TestUpstreamFlags(t *testing.T) {
	env := map[string]string{"MEMOSRT_UPSTREAM_API_KEY": "k1", "OPENAI_API_KEY": "k2"}
	getenv := func(k string) string { return env[k] }
	none := func(string) string { return "" }
	onlyOpenAI := func(k string) string { return map[string]string{"OPENAI_API_KEY": "k2"}[k] }
	for _, c := range []struct {
		name, backend, model, alias string
		getenv                      func(string) string
		want                        *memosrt.UpstreamOptions
		err                         string
	}{
		{"llama", "llama", "", "", getenv, nil, ""},
		{"ollama host", "ollama", "m", "", getenv, &memosrt.UpstreamOptions{API: "ollama", URL: "http://127.0.0.1:11434", Model: "m"}, ""},
		{"ollama alias", "ollama", "", "m", getenv, &memosrt.UpstreamOptions{API: "ollama", URL: "http://127.0.0.1:11434", Model: "m"}, ""},
		{"ollama url", "ollama:http://gpu:11434", "m", "m", getenv, &memosrt.UpstreamOptions{API: "ollama", URL: "http://gpu:11434", Model: "m"}, ""},
		{"openai", "openai:http://gpu:8000/v1", "m", "", getenv, &memosrt.UpstreamOptions{API: "openai", URL: "http://gpu:8000/v1", Model: "m", APIKey: "k1"}, ""},
		{"openai key fallback", "openai:https://gpu", "m", "", onlyOpenAI, &memosrt.UpstreamOptions{API: "openai", URL: "https://gpu", Model: "m", APIKey: "k2"}, ""},
		{"openai no key", "openai:http://gpu:8000", "m", "", none, &memosrt.UpstreamOptions{API: "openai", URL: "http://gpu:8000", Model: "m"}, ""},
		{"openai without URL", "openai", "m", "", getenv, nil, "--backend openai needs the server's URL"},
		{"openai empty URL", "openai:", "m", "", getenv, nil, "--backend openai needs the server's URL"},
		{"openai bad URL", "openai:gpu:8000", "m", "", getenv, nil, `--backend openai: "gpu:8000" is not an http:// or https:// URL`},
		{"openai ftp", "openai:ftp://gpu", "m", "", getenv, nil, "is not an http:// or https:// URL"},
		{"openai without model", "openai:http://gpu:8000", "", "", getenv, nil, "--backend openai needs --upstream-model MODEL"},
		{"models differ", "ollama", "a", "b", getenv, nil, "differ"},
		{"unknown", "vllm:http://gpu", "m", "", getenv, nil, `--backend "vllm:http://gpu": want llama, ollama[:URL] or openai:URL`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := upstreamFromFlags(c.backend, "http://127.0.0.1:11434", c.model, c.alias, c.getenv)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("%v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (got == nil) != (c.want == nil) || got != nil && *got != *c.want {
				t.Fatalf("%+v, want %+v", got, c.want)
			}
		})
	}
}

// serve refuses a bad --backend before it opens anything.
func TestServeBackendErrors(t *testing.T) {
	for args, want := range map[string]string{
		"--backend openai":                                     "needs the server's URL",
		"--backend openai:localhost":                           "not an http:// or https:// URL",
		"--backend openai:http://127.0.0.1:9":                  "needs --upstream-model",
		"--backend ollama --ollama-model a --upstream-model b": "differ",
	} {
		err := run(context.Background(), append([]string{"serve", "--db", t.TempDir(), "--addr", "127.0.0.1:0"}, strings.Fields(args)...))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("serve %s: %v, want %q", args, err, want)
		}
	}
}

func TestParseCompose(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64
		ok   bool
	}{
		{"off", 0, true}, {"on", 0.15, true}, {"auto", composeAuto, true}, {"0.2", 0.2, true}, {"1", 1, true},
		{"0", 0, false}, {"1.5", 0, false}, {"-0.1", 0, false}, {"often", 0, false},
	} {
		got, err := parseCompose(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseCompose(%q) = %g, %v", tc.in, got, err)
		}
	}
}
