package safepath

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// ErrEscape is returned by Join when a name is not one local path element
// (empty, ".", "..", a separator, a NUL byte, an absolute or volume path),
// or when the joined path would not lie strictly inside root.
var ErrEscape = errors.New("safepath: name escapes its folder")

// Join returns root joined with names, each of which must be a single
// local path element: not empty, not "." or "..", without '/', '\\' or
// NUL (filepath.IsLocal, and one element only). The result is proved to
// lie strictly inside root (filepath.Rel of the cleaned paths neither
// starts with ".." nor is "."), so removing it never removes root or
// anything outside it. Errors wrap ErrEscape and quote the name.
func Join(root string, names ...string) (string, error) {
	if root == "" {
		return "", fmt.Errorf("%w: empty root", ErrEscape)
	}
	if len(names) == 0 {
		return "", fmt.Errorf("%w: no name under %s", ErrEscape, root)
	}
	for _, n := range names {
		if !Element(n) {
			return "", fmt.Errorf("%w: %q under %s", ErrEscape, n, root)
		}
	}
	root = filepath.Clean(root)
	p := filepath.Join(append([]string{root}, names...)...)
	rel, err := filepath.Rel(root, p)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || !filepath.IsLocal(rel) {
		return "", fmt.Errorf("%w: %q under %s", ErrEscape, filepath.Join(names...), root)
	}
	return p, nil
}

// Element reports whether n is one local path element: filepath.IsLocal,
// not ".", and free of '/', '\\' and NUL.
func Element(n string) bool {
	return n != "" && n != "." && n != ".." && filepath.IsLocal(n) &&
		!strings.ContainsAny(n, "/\\\x00")
}
