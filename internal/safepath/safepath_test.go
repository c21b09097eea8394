package safepath

import (
	"errors"
	"path/filepath"
	"testing"
)

func TestJoin(t *testing.T) {
	root := filepath.Join("/data", "adapters")
	for _, c := range []struct {
		names []string
		want  string
	}{
		{[]string{"alice"}, "/data/adapters/alice"},
		{[]string{"alice", "v3.gguf"}, "/data/adapters/alice/v3.gguf"},
		{[]string{"..."}, "/data/adapters/..."},
		{[]string{".hidden"}, "/data/adapters/.hidden"},
	} {
		got, err := Join(root, c.names...)
		if err != nil || got != c.want {
			t.Errorf("Join(%q, %q) = %q, %v; want %q", root, c.names, got, err, c.want)
		}
	}
	for _, names := range [][]string{
		{".."}, {"."}, {""}, {"a/../.."}, {"../x"}, {"a/b"}, {"/etc"}, {"a\\b"}, {"a\x00b"},
		{"alice", ".."}, {"alice", "."}, {},
	} {
		if got, err := Join(root, names...); !errors.Is(err, ErrEscape) {
			t.Errorf("Join(%q, %q) = %q, %v; want ErrEscape", root, names, got, err)
		}
	}
	if _, err := Join("", "a"); !errors.Is(err, ErrEscape) {
		t.Errorf("empty root: %v", err)
	}
}
