// Package lint holds repository-wide checks of our own rules (STYLE.md).
package lint

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCgoBoundary: `import "C"` lives only in runtime/llama; "unsafe" is
// imported there or with a `// unsafe:` reason comment on the import line.
func TestCgoBoundary(t *testing.T) {
	root, _ := filepath.Abs(filepath.Join("..", ".."))
	n := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") || rel == "third_party" || rel == "models" || rel == "bin" || rel == "lib" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		n++
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, src, parser.ImportsOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		for _, imp := range f.Imports {
			switch imp.Path.Value {
			case `"C"`:
				if dir != "runtime/llama" {
					t.Errorf("%s imports \"C\": cgo belongs in runtime/llama only", rel)
				}
			case `"unsafe"`:
				if dir != "runtime/llama" && (imp.Comment == nil || !strings.Contains(imp.Comment.Text(), "unsafe:")) {
					t.Errorf("%s imports \"unsafe\" without a `// unsafe:` reason comment", rel)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 20 {
		t.Fatalf("walked only %d Go files from %s", n, root)
	}
}

// TestOnePipeline (issue 11): the request pipeline and the pack layout live
// in the root package; server/ and cmd/memosrt translate only: their
// non-test files call none of the pipeline's steps (tokenizing, rendering,
// restoring or saving KV state, storing packs, driving the engine).
func TestOnePipeline(t *testing.T) {
	root, _ := filepath.Abs(filepath.Join("..", ".."))
	banned := []string{".Restore(", ".RestoreSeq(", ".Tokenize(", "NewLayout(", ".RenderChat(", ".SaveSeq(", "kvcache.Header{", ".Generate(ctx, runtime.Request"}
	for _, dir := range []string{"server", "cmd/memosrt"} {
		files, _ := filepath.Glob(filepath.Join(root, dir, "*.go"))
		n := 0
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			n++
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range banned {
				if strings.Contains(string(src), b) {
					t.Errorf("%s/%s calls %q: pipeline work belongs in the root package", dir, filepath.Base(path), b)
				}
			}
		}
		if n == 0 {
			t.Fatalf("no Go files in %s", dir)
		}
	}
}
