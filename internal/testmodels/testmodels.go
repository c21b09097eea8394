package testmodels

import (
	"os"
	"path/filepath"
	goruntime "runtime"
	"testing"
)

// Dir returns the models directory: $MEMOSRT_MODELS, else ../shared/models
// relative to the repository root.
func Dir() string {
	if d := os.Getenv("MEMOSRT_MODELS"); d != "" {
		return d
	}
	_, file, _, _ := goruntime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	return filepath.Join(root, "..", "shared", "models")
}

// Path returns the path of the named model file, failing t if it is missing.
func Path(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(Dir(), name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("test model %s missing (set MEMOSRT_MODELS): %v", name, err)
	}
	return p
}

// Stories is stories260K.gguf, the tiny real model used for output-equality tests.
func Stories(t testing.TB) string { return Path(t, "stories260K.gguf") }
