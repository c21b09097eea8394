package runtime

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/ollama/ollama/fs/ggml"
)

// ErrModelFile is returned by CheckModelFile and Load for a file llama.cpp
// cannot load as a model; the message gives the reason.
var ErrModelFile = errors.New("runtime: not a loadable model")

// CheckModelFile reads the GGUF header and tensor table of path (no
// tensor data; arrays such as the vocabulary are skipped) and reports
// ErrModelFile with the reason when it is not a model: not GGUF (magic),
// truncated (a tensor's data past the end of the file, or the header cut
// short), vocab-only (no tensors: a tokenizer fixture), or without
// general.architecture. It returns the architecture. Load calls it before
// llama_model_load_from_file, whose failure says only "failed to load".
func CheckModelFile(path string) (arch string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	g, err := ggml.Decode(f, 0)
	switch {
	case err != nil && strings.Contains(err.Error(), "invalid file magic"):
		return "", fmt.Errorf("%w: %s is not a GGUF file (bad magic)", ErrModelFile, path)
	case err != nil && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(err.Error(), "exceeds file size")):
		return "", fmt.Errorf("%w: %s is truncated: %v", ErrModelFile, path, err)
	case err != nil:
		return "", fmt.Errorf("%w: %s: %v", ErrModelFile, path, err)
	}
	arch = g.KV().String("general.architecture")
	if arch == "" {
		return "", fmt.Errorf("%w: %s has no general.architecture", ErrModelFile, path)
	}
	if len(g.Tensors().Items()) == 0 {
		return arch, fmt.Errorf("%w: %s is vocab-only (no weight tensors: a tokenizer file, not a model)", ErrModelFile, path)
	}
	return arch, nil
}
