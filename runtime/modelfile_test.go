package runtime

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memosrt/memosrt/internal/testmodels"
)

// CheckModelFile names the reason a file is not a model, and Load reports
// it before llama.cpp is asked.
func TestCheckModelFile(t *testing.T) {
	good := testmodels.Stories(t)
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if arch, err := CheckModelFile(good); err != nil || arch != "llama" {
		t.Fatalf("stories260K: %q %v", arch, err)
	}
	for _, c := range []struct{ name, path, want string }{
		{"text", write("notes.gguf", []byte("hello, not a model\n")), "is not a GGUF file (bad magic)"},
		{"empty", write("empty.gguf", nil), "is truncated"},
		{"truncated", write("cut.gguf", data[:len(data)/2]), "is truncated"},
		{"header cut", write("head.gguf", data[:64]), "is truncated"},
		{"vocab only", filepath.Join(filepath.Dir(good), "ggml-vocab-llama-spm.gguf"), "is vocab-only"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := CheckModelFile(c.path)
			if !errors.Is(err, ErrModelFile) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want ErrModelFile: ...%s", err, c.want)
			}
			_, lerr := Load(t.Context(), Options{ModelPath: c.path, NCtx: 64, Threads: 1})
			if !errors.Is(lerr, ErrModelFile) || !strings.Contains(lerr.Error(), c.want) {
				t.Fatalf("Load: %v", lerr)
			}
		})
	}
}
