package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/memosrt/memosrt/bench/gguf"
)

// defaultTokenizer is the GGUF whose Llama-2 tokenizer generated models copy.
func defaultTokenizer() string {
	exe, _ := os.Executable()
	for _, p := range []string{
		filepath.Join("..", "shared", "models", "llama-2-tiny-random.gguf"),
		filepath.Join(filepath.Dir(exe), "..", "..", "shared", "models", "llama-2-tiny-random.gguf"),
	} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

func cmdGenModel(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("gen-model", flag.ContinueOnError)
	var names []string
	for k := range gguf.Presets {
		names = append(names, k)
	}
	sort.Strings(names)
	preset := fs.String("preset", "1b", "model shape: "+strings.Join(names, ", "))
	out := fs.String("out", "", "output GGUF path")
	tok := fs.String("tokenizer", defaultTokenizer(), "GGUF to copy the tokenizer from")
	seed := fs.Int64("seed", 1, "weight RNG seed")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	spec, ok := gguf.Presets[*preset]
	if !ok {
		return fmt.Errorf("unknown preset %q (%s)", *preset, strings.Join(names, ", "))
	}
	if *out == "" {
		return errors.New("--out is required")
	}
	if *tok == "" {
		return errors.New("--tokenizer is required (llama-2-tiny-random.gguf from ../shared/models)")
	}
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		return err
	}
	start := time.Now()
	if err := gguf.Write(ctx, *out, spec, *tok, *seed); err != nil {
		return err
	}
	st, _ := os.Stat(*out)
	fmt.Printf("wrote %s: %s shape, %s in %.1fs\n", *out, *preset, bytesStr(st.Size()), time.Since(start).Seconds())
	return nil
}
