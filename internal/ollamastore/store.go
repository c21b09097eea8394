package ollamastore

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/ollama/ollama/types/model"

	"github.com/memosrt/memosrt/internal/safepath"
)

// MediaTypeModel is the media type of a manifest's weights layer
// (Ollama server/images.go GetModel).
const MediaTypeModel = "application/vnd.ollama.image.model"

// digestRE is the digest form Ollama accepts (manifest/paths.go BlobsPath).
var digestRE = regexp.MustCompile(`^sha256:[0-9a-fA-F]{64}$`)

type layer struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
}

type manifest struct {
	SchemaVersion int     `json:"schemaVersion"`
	Config        layer   `json:"config"`
	Layers        []layer `json:"layers"`
}

// parse returns the fully qualified name of s, or ErrInvalidName. A value
// that ends in ".gguf" is a file name, never a model name.
func parse(s string) (model.Name, error) {
	n := model.ParseName(s)
	if strings.HasSuffix(strings.ToLower(s), ".gguf") || !n.IsFullyQualified() {
		return model.Name{}, fmt.Errorf("%w: %q", ErrInvalidName, s)
	}
	return n, nil
}

// IsName reports whether s parses as an Ollama model name
// ([host/][namespace/]model[:tag], not ending in ".gguf"). Paths such as
// "/abs/x", "./x" and "x.gguf" are not names; "dir/x" is (namespace dir).
func IsName(s string) bool {
	_, err := parse(s)
	return err == nil
}

// DisplayName is the short name Ollama lists the model under: the model and
// its tag, with the namespace when it is not "library" and host/namespace
// when the host is not registry.ollama.ai ("llama3.2" is "llama3.2:latest",
// "registry.ollama.ai/library/x:1b" is "x:1b"; Ollama
// types/model.Name.DisplayShortest). It is "" when s is not a name.
func DisplayName(s string) string {
	n, err := parse(s)
	if err != nil {
		return ""
	}
	return n.DisplayShortest()
}

// ManifestPath is the path of name's manifest in storeDir,
// <storeDir>/manifests/<host>/<namespace>/<model>/<tag>. The error is
// ErrInvalidName.
func ManifestPath(storeDir, name string) (string, error) {
	n, err := parse(name)
	if err != nil {
		return "", err
	}
	// each part (host, namespace, model, tag) is one path element inside
	// the store's manifests folder; safepath proves it
	parts := []string{"manifests"}
	parts = append(parts, strings.Split(filepath.ToSlash(n.Filepath()), "/")...)
	p, err := safepath.Join(storeDir, parts...)
	if err != nil {
		return "", fmt.Errorf("%w: %q: %v", ErrInvalidName, name, err)
	}
	return p, nil
}

// Resolve returns the path of the GGUF blob of the model name in the Ollama
// store storeDir: it reads name's manifest (see ManifestPath), takes its
// layer of media type MediaTypeModel (the last one when there are several,
// as Ollama's GetModel does) and returns <storeDir>/blobs/sha256-<hex> after
// checking that the blob exists with the manifest's size. The blob's digest
// is not recomputed (that would read the whole file at each start).
//
// Errors, each naming the paths involved: ErrInvalidName, ErrNoManifest (the
// manifest path searched), ErrBadManifest, ErrNoModelLayer (with the media
// types found), ErrBlobMissing, ErrBlobSize (both sizes, bytes), or the
// underlying I/O error.
func Resolve(storeDir, name string) (path string, err error) {
	mp, err := ManifestPath(storeDir, name)
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(mp)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%w %s", ErrNoManifest, mp)
	} else if err != nil {
		return "", fmt.Errorf("ollamastore: read manifest: %w", err)
	}
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return "", fmt.Errorf("%w %s: %v", ErrBadManifest, mp, err)
	}
	if m.SchemaVersion != 2 {
		return "", fmt.Errorf("%w %s: schemaVersion %d, want 2", ErrBadManifest, mp, m.SchemaVersion)
	}
	var (
		weights *layer
		types   []string
	)
	for i, l := range m.Layers {
		if l.MediaType == MediaTypeModel {
			weights = &m.Layers[i]
		}
		types = append(types, l.MediaType)
	}
	if weights == nil {
		return "", fmt.Errorf("%w in manifest %s (%s; layers: %s)", ErrNoModelLayer, mp, MediaTypeModel, layerList(types))
	}
	if !digestRE.MatchString(weights.Digest) {
		return "", fmt.Errorf("%w %s: model layer digest %q, want sha256:<64 hex>", ErrBadManifest, mp, weights.Digest)
	}
	blob := filepath.Join(storeDir, "blobs", strings.ReplaceAll(weights.Digest, ":", "-"))
	st, err := os.Stat(blob)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%w: %s (model layer of manifest %s; pull the model again)", ErrBlobMissing, blob, mp)
	} else if err != nil {
		return "", fmt.Errorf("ollamastore: blob: %w", err)
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("%w: %s is not a regular file (model layer of manifest %s)", ErrBlobMissing, blob, mp)
	}
	if st.Size() != weights.Size {
		return "", fmt.Errorf("%w: %s is %d bytes, manifest %s says %d", ErrBlobSize, blob, st.Size(), mp, weights.Size)
	}
	return blob, nil
}

func layerList(types []string) string {
	if len(types) == 0 {
		return "none"
	}
	return strings.Join(types, ", ")
}

// Model is a model found in the store: its display name (DisplayName) and
// the path of its GGUF blob.
type Model struct {
	Name string
	Path string
}

// List returns every model of the store storeDir whose manifest resolves
// (Resolve), sorted by name; a store that does not exist has none. skipped
// holds the error of each manifest that does not resolve (a model without
// a GGUF layer, a missing blob), so that the caller can say why a model
// is not served. Manifests are the files four levels under
// <storeDir>/manifests (host/namespace/model/tag).
func List(storeDir string) (models []Model, skipped []error, err error) {
	root := filepath.Join(storeDir, "manifests")
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p == root {
				return filepath.SkipDir
			}
			return err
		}
		rel, rerr := filepath.Rel(root, p)
		if rerr != nil || d.IsDir() {
			return rerr
		}
		parts := strings.Split(filepath.ToSlash(rel), "/")
		if len(parts) != 4 || !d.Type().IsRegular() {
			return nil
		}
		name := parts[0] + "/" + parts[1] + "/" + parts[2] + ":" + parts[3]
		path, err := Resolve(storeDir, name)
		if err != nil {
			skipped = append(skipped, err)
			return nil
		}
		models = append(models, Model{Name: DisplayName(name), Path: path})
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		err = nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("ollamastore: list %s: %w", root, err)
	}
	slices.SortFunc(models, func(a, b Model) int { return strings.Compare(a.Name, b.Name) })
	return models, skipped, nil
}

// ResolveModel turns a model argument (memosrt's --model) into a GGUF
// path: a file that exists is used as is (name ""); otherwise a value that
// parses as an Ollama model name (llama3.2:1b, user/model:tag) is looked
// up in the store at storeDir (Resolve) and named by its Ollama name
// (llama3.2:1b, stories:latest; DisplayName). Errors start with "model":
// a directory, a path that is neither a file nor a name (the stat error),
// ErrNoManifest saying where the store is, Resolve's errors.
func ResolveModel(storeDir, v string) (path, name string, err error) {
	st, statErr := os.Stat(v)
	if statErr == nil {
		if st.IsDir() {
			return "", "", fmt.Errorf("model: %s is a directory, want a GGUF file", v)
		}
		return v, "", nil
	}
	if !errors.Is(statErr, os.ErrNotExist) || !IsName(v) {
		return "", "", fmt.Errorf("model: %w", statErr)
	}
	path, err = Resolve(storeDir, v)
	switch {
	case errors.Is(err, ErrNoManifest):
		return "", "", fmt.Errorf("model %q not found: no file %s, %w (the store is $OLLAMA_MODELS, default ~/.ollama/models)", v, v, err)
	case err != nil:
		return "", "", fmt.Errorf("model %q: %w", v, err)
	}
	return path, DisplayName(v), nil
}
