package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/memosrt/memosrt/bench/gguf"
	"github.com/memosrt/memosrt/internal/cli"
)

// defaultTokenizer is the GGUF whose tokenizer a generated model of spec
// copies: the Llama 2 one of llama-2-tiny-random.gguf, or for BERT the
// WordPiece one of ggml-vocab-bert-bge.gguf.
func defaultTokenizer(spec gguf.Spec) string {
	file := "llama-2-tiny-random.gguf"
	if spec.Arch == gguf.ArchBERT {
		file = "ggml-vocab-bert-bge.gguf"
	}
	exe, _ := os.Executable()
	for _, p := range []string{
		filepath.Join("..", "shared", "models", file),
		filepath.Join(filepath.Dir(exe), "..", "..", "shared", "models", file),
	} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

func newGenModelCmd() *cobra.Command {
	c := &cobra.Command{Use: "gen-model", Short: "Write a random-weight GGUF of a realistic shape (benchmarks)", Args: cli.NoArgs}
	fs := c.Flags()
	fs.SortFlags = false
	var names []string
	for k := range gguf.Presets {
		names = append(names, k)
	}
	sort.Strings(names)
	preset := fs.String("preset", "1b", "model shape `PRESET`: "+strings.Join(names, ", "))
	out := fs.String("out", "", "output GGUF `PATH`")
	tok := fs.String("tokenizer", "", "`GGUF` to copy the tokenizer from (default: llama-2-tiny-random.gguf in ../shared/models when found; for bert-tiny ggml-vocab-bert-bge.gguf)")
	seed := fs.Int64("seed", 1, "weight RNG seed")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if *tok == "" {
			*tok = defaultTokenizer(gguf.Presets[*preset])
		}
		return genModel(cmd.Context(), names, *preset, *out, *tok, *seed)
	}
	return c
}

func genModel(ctx context.Context, names []string, preset, out, tok string, seed int64) error {
	spec, ok := gguf.Presets[preset]
	if !ok {
		return fmt.Errorf("unknown preset %q (%s)", preset, strings.Join(names, ", "))
	}
	if out == "" {
		return errors.New("--out is required")
	}
	if tok == "" {
		return errors.New("--tokenizer is required (llama-2-tiny-random.gguf from ../shared/models; ggml-vocab-bert-bge.gguf for a BERT preset)")
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	start := time.Now()
	if err := gguf.Write(ctx, out, spec, tok, seed); err != nil {
		return err
	}
	st, _ := os.Stat(out)
	fmt.Printf("wrote %s: %s shape, %s in %.1fs\n", out, preset, cli.Bytes(st.Size()), time.Since(start).Seconds())
	return nil
}
