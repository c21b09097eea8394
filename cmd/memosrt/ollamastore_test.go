package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ollama/ollama/api"

	"github.com/memosrt/memosrt/internal/testmodels"
)

// ollamaStore lays out an Ollama model store in a temporary directory
// holding stories260K.gguf as registry.ollama.ai/library/stories:latest
// (manifest and blob, as `ollama pull` leaves them).
func ollamaStore(t *testing.T) string {
	t.Helper()
	return ollamaStoreWith(t, testmodels.Stories(t), "stories")
}

// ollamaStoreWith lays out an Ollama model store in a temporary directory
// holding the GGUF file src as registry.ollama.ai/library/<name>:latest.
func ollamaStoreWith(t *testing.T, src, name string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	store := t.TempDir()
	digest := fmt.Sprintf("sha256:%x", sha256.Sum256(b))
	blob := filepath.Join(store, "blobs", strings.ReplaceAll(digest, ":", "-"))
	mf := filepath.Join(store, "manifests", "registry.ollama.ai", "library", name, "latest")
	for _, d := range []string{filepath.Dir(blob), filepath.Dir(mf)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Link(src, blob); err != nil {
		if err := os.WriteFile(blob, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	type layer struct {
		MediaType string `json:"mediaType"`
		Digest    string `json:"digest"`
		Size      int64  `json:"size"`
	}
	m, _ := json.Marshal(map[string]any{"schemaVersion": 2,
		"config": layer{"application/vnd.docker.container.image.v1+json", "sha256:" + hex.EncodeToString(make([]byte, 32)), 2},
		"layers": []layer{{"application/vnd.ollama.image.model", digest, int64(len(b))}}})
	if err := os.WriteFile(mf, m, 0o644); err != nil {
		t.Fatal(err)
	}
	return store
}

// runEnv runs the CLI with extra environment variables; it returns stdout,
// and stderr too on failure.
func runEnv(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(binPath, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String() + stderr.String(), err
	}
	return stdout.String(), nil
}

// --model NAME[:TAG] loads the model from Ollama's store (OLLAMA_MODELS):
// `run` generates what the file path generates, a name not in the store
// fails naming the manifest searched, and serve lists the model under its
// Ollama name and answers a chat that names it without the tag.
func TestModelFromOllamaStore(t *testing.T) {
	store := ollamaStore(t)
	env := []string{"OLLAMA_MODELS=" + store}

	t.Run("run", func(t *testing.T) {
		db := t.TempDir()
		must(t, "mem", "add", "--db", db, "--cube", "c", "Lily has a cat named Kitty.")
		if out, err := runEnv(t, env, "kv", "warm", "--db", db, "--cube", "c", "--model", "stories"); err != nil {
			t.Fatalf("kv warm --model stories: %v\n%s", err, out)
		}
		// the pack warmed through the name restores under the file path: one model
		var warm, cold runJSON
		for _, c := range []struct {
			model string
			flags []string
			out   *runJSON
		}{{testmodels.Stories(t), nil, &warm}, {"stories", []string{"--no-cache"}, &cold}} {
			args := append([]string{"run", "--db", db, "--cube", "c", "--model", c.model, "--threads", "2",
				"--num-predict", "16", "--json"}, c.flags...)
			out, err := runEnv(t, env, append(args, "Once upon a time")...)
			if err != nil {
				t.Fatalf("run --model %s: %v\n%s", c.model, err, out)
			}
			if err := json.Unmarshal([]byte(out), c.out); err != nil {
				t.Fatalf("bad JSON %q: %v", out, err)
			}
		}
		if warm.CachedTokens == 0 || cold.Response == "" || cold.Response != warm.Response {
			t.Fatalf("file (cached %d) %q\nstories %q", warm.CachedTokens, warm.Response, cold.Response)
		}
	})

	t.Run("not found", func(t *testing.T) {
		out, err := runEnv(t, env, "run", "--db", t.TempDir(), "--cube", "c", "--model", "stories:1b", "hi")
		want := filepath.Join(store, "manifests", "registry.ollama.ai", "library", "stories", "1b")
		if err == nil || !strings.Contains(out, `model "stories:1b" not found: no file stories:1b`) || !strings.Contains(out, want) {
			t.Fatalf("err %v, output:\n%s\nwant the error to name %s", err, out, want)
		}
	})

	t.Run("serve", func(t *testing.T) {
		p := startServe(t, t.TempDir(), env, "--model", "stories")
		var tags api.ListResponse
		if code := p.call(t, "GET", "/api/tags", nil, &tags); code != http.StatusOK || len(tags.Models) != 1 || tags.Models[0].Name != "stories:latest" {
			t.Fatalf("/api/tags: %d %+v, want stories:latest", code, tags.Models)
		}
		for _, name := range []string{"stories", "stories:latest"} {
			var r api.ChatResponse
			in := map[string]any{"model": name, "stream": false, "messages": []map[string]string{{"role": "user", "content": "Hi"}},
				"options": map[string]any{"num_predict": 4, "temperature": 0}}
			if code := p.call(t, "POST", "/api/chat", in, &r); code != http.StatusOK || r.Model != "stories:latest" || r.EvalCount == 0 {
				t.Fatalf("/api/chat model %s: %d %+v", name, code, r)
			}
		}
	})

	// several models: the primary, --models-dir's files, then the store's;
	// the others load on first use, and keep_alive 0 unloads
	t.Run("serve several", func(t *testing.T) {
		dir := t.TempDir()
		b, err := os.ReadFile(testmodels.Stories(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "other.gguf"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("not a model"), 0o644)
		// a tokenizer fixture (vocab-only GGUF) is not listed
		vocab, err := os.ReadFile(testmodels.Path(t, "ggml-vocab-gpt-2.gguf"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "vocab.gguf"), vocab, 0o644); err != nil {
			t.Fatal(err)
		}
		tiny := testmodels.Path(t, "llama-2-tiny-random.gguf")
		p := startServe(t, t.TempDir(), env, "--model", tiny, "--models-dir", dir, "--keep-alive", "-1")
		var tags api.ListResponse
		p.call(t, "GET", "/api/tags", nil, &tags)
		var names []string
		for _, m := range tags.Models {
			names = append(names, m.Name)
		}
		if strings.Join(names, " ") != "llama-2-tiny-random:latest other:latest stories:latest" {
			t.Fatalf("/api/tags lists %v", names)
		}
		ps := func() []string {
			var r api.ProcessResponse
			p.call(t, "GET", "/api/ps", nil, &r)
			var out []string
			for _, m := range r.Models {
				out = append(out, m.Name)
			}
			slices.Sort(out)
			return out
		}
		if got := ps(); strings.Join(got, " ") != "llama-2-tiny-random:latest" {
			t.Fatalf("/api/ps at start: %v", got)
		}
		var r api.GenerateResponse
		in := map[string]any{"model": "stories", "prompt": "Once upon a time", "stream": false, "options": map[string]any{"num_predict": 4, "temperature": 0}}
		if code := p.call(t, "POST", "/api/generate", in, &r); code != http.StatusOK || r.Model != "stories:latest" || r.EvalCount == 0 {
			t.Fatalf("/api/generate stories: %d %+v", code, r)
		}
		if got := ps(); strings.Join(got, " ") != "llama-2-tiny-random:latest stories:latest" {
			t.Fatalf("/api/ps after a request of stories: %v", got)
		}
		stop := map[string]any{"model": "stories:latest", "keep_alive": 0}
		if code := p.call(t, "POST", "/api/generate", stop, &r); code != http.StatusOK || r.DoneReason != "unload" {
			t.Fatalf("stop: %d %+v", code, r)
		}
		if got := ps(); strings.Join(got, " ") != "llama-2-tiny-random:latest" {
			t.Fatalf("/api/ps after stopping stories: %v", got)
		}
	})
}
