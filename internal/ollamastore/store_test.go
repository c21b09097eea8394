package ollamastore_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memosrt/memosrt/internal/ollamastore"
	"github.com/memosrt/memosrt/internal/testmodels"
)

// storiesDigest returns "sha256:<hex>" and the size in bytes of the file.
func storiesDigest(t *testing.T, path string) (string, int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		t.Fatal(err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), n
}

type testLayer struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
}

// writeManifest writes the manifest of registry.ollama.ai/library/<model>/<tag>.
func writeManifest(t *testing.T, store, modelName, tag string, layers []testLayer) string {
	t.Helper()
	p := filepath.Join(store, "manifests", "registry.ollama.ai", "library", modelName, tag)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.docker.distribution.manifest.v2+json",
		"config":        testLayer{"application/vnd.docker.container.image.v1+json", "sha256:" + strings.Repeat("0", 64), 2},
		"layers":        layers,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// placeBlob links (or copies) src to <store>/blobs/sha256-<hex>.
func placeBlob(t *testing.T, store, src, digest string) string {
	t.Helper()
	dst := filepath.Join(store, "blobs", strings.ReplaceAll(digest, ":", "-"))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(src, dst); err == nil {
		return dst
	}
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

func TestResolve(t *testing.T) {
	src := testmodels.Stories(t)
	digest, size := storiesDigest(t, src)
	store := t.TempDir()
	template := testLayer{"application/vnd.ollama.image.template", "sha256:" + strings.Repeat("1", 64), 10}
	writeManifest(t, store, "stories", "latest", []testLayer{{ollamastore.MediaTypeModel, digest, size}, template})
	blob := placeBlob(t, store, src, digest)

	// a second tag with the same blob; other tags' faults
	writeManifest(t, store, "stories", "260k", []testLayer{template, {ollamastore.MediaTypeModel, digest, size}})
	noModel := writeManifest(t, store, "nomodel", "latest", []testLayer{template})
	missingDigest := "sha256:" + strings.Repeat("a", 64)
	writeManifest(t, store, "noblob", "latest", []testLayer{{ollamastore.MediaTypeModel, missingDigest, size}})
	writeManifest(t, store, "short", "latest", []testLayer{{ollamastore.MediaTypeModel, digest, size + 1}})
	if err := os.MkdirAll(filepath.Join(store, "manifests", "registry.ollama.ai", "library", "broken"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(store, "manifests", "registry.ollama.ai", "library", "broken", "latest"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}

	ok := []string{"stories:latest", "stories", "library/stories", "registry.ollama.ai/library/stories:latest", "stories:260k"}
	for _, name := range ok {
		t.Run(name, func(t *testing.T) {
			got, err := ollamastore.Resolve(store, name)
			if err != nil {
				t.Fatal(err)
			}
			if got != blob {
				t.Fatalf("Resolve(%q) = %s, want %s", name, got, blob)
			}
		})
	}

	bad := []struct {
		name string
		want error
		text []string // substrings of the message
	}{
		{"stories:1b", ollamastore.ErrNoManifest, []string{filepath.Join(store, "manifests", "registry.ollama.ai", "library", "stories", "1b")}},
		{"user/other:tag", ollamastore.ErrNoManifest, []string{filepath.Join(store, "manifests", "registry.ollama.ai", "user", "other", "tag")}},
		{"nomodel", ollamastore.ErrNoModelLayer, []string{noModel, "application/vnd.ollama.image.template"}},
		{"noblob", ollamastore.ErrBlobMissing, []string{filepath.Join(store, "blobs", "sha256-"+strings.Repeat("a", 64))}},
		{"short", ollamastore.ErrBlobSize, []string{blob, "bytes"}},
		{"broken", ollamastore.ErrBadManifest, []string{"broken"}},
		{"x.gguf", ollamastore.ErrInvalidName, nil},
		{"/abs/x", ollamastore.ErrInvalidName, nil},
		{"./x", ollamastore.ErrInvalidName, nil},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			_, err := ollamastore.Resolve(store, c.name)
			if !errors.Is(err, c.want) {
				t.Fatalf("Resolve(%q) = %v, want %v", c.name, err, c.want)
			}
			for _, s := range c.text {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not name %q", err, s)
				}
			}
		})
	}
}

func TestDisplayName(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"llama3.2", "llama3.2:latest"},
		{"llama3.2:1b", "llama3.2:1b"},
		{"library/llama3.2:latest", "llama3.2:latest"},
		{"registry.ollama.ai/library/x:tag", "x:tag"},
		{"user/model:tag", "user/model:tag"},
		{"example.com/user/model", "example.com/user/model:latest"},
		{"models/x.gguf", ""},
		{"/tmp/x", ""},
	} {
		t.Run(c.in, func(t *testing.T) {
			if got := ollamastore.DisplayName(c.in); got != c.want {
				t.Errorf("DisplayName(%q) = %q, want %q", c.in, got, c.want)
			}
			if got := ollamastore.IsName(c.in); got != (c.want != "") {
				t.Errorf("IsName(%q) = %v", c.in, got)
			}
		})
	}
}

func TestList(t *testing.T) {
	src := testmodels.Path(t, "stories260K.gguf")
	digest, size := storiesDigest(t, src)
	store := t.TempDir()
	if ms, skipped, err := ollamastore.List(store); err != nil || len(ms) != 0 || len(skipped) != 0 {
		t.Fatalf("empty store: %v %v %v", ms, skipped, err)
	}
	blob := placeBlob(t, store, src, digest)
	weights := []testLayer{{ollamastore.MediaTypeModel, digest, size}}
	writeManifest(t, store, "stories", "latest", weights)
	writeManifest(t, store, "stories", "tiny", weights)
	// a manifest without weights (a projector only) is skipped, with its reason
	writeManifest(t, store, "vision", "latest", []testLayer{{"application/vnd.ollama.image.projector", digest, size}})
	ms, skipped, err := ollamastore.List(store)
	if err != nil {
		t.Fatal(err)
	}
	want := []ollamastore.Model{{Name: "stories:latest", Path: blob}, {Name: "stories:tiny", Path: blob}}
	if len(ms) != len(want) || ms[0] != want[0] || ms[1] != want[1] {
		t.Fatalf("List = %+v, want %+v", ms, want)
	}
	if len(skipped) != 1 || !errors.Is(skipped[0], ollamastore.ErrNoModelLayer) {
		t.Fatalf("skipped = %v, want one ErrNoModelLayer", skipped)
	}
	if ms, _, err := ollamastore.List(filepath.Join(store, "nowhere")); err != nil || ms != nil {
		t.Fatalf("missing store: %v %v", ms, err)
	}
}

// A name never yields a manifest path outside the store's manifests
// folder: names with "..", "." or separators in a part are ErrInvalidName.
func TestManifestPathStaysInside(t *testing.T) {
	store := t.TempDir()
	p, err := ollamastore.ManifestPath(store, "llama3.2")
	if want := filepath.Join(store, "manifests", "registry.ollama.ai", "library", "llama3.2", "latest"); err != nil || p != want {
		t.Fatalf("ManifestPath(llama3.2) = %q, %v; want %q", p, err, want)
	}
	for _, n := range []string{"..", "../../etc/passwd", "x/../../y", "./x", "/abs/x", "a/../..:tag", "..:latest", "x:..", "h/../x:1"} {
		if p, err := ollamastore.ManifestPath(store, n); !errors.Is(err, ollamastore.ErrInvalidName) {
			t.Errorf("ManifestPath(%q) = %q, %v; want ErrInvalidName", n, p, err)
		}
	}
}
