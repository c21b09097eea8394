package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/memosrt/memosrt/internal/cli"
	"github.com/memosrt/memosrt/runtime/llama"
)

func newQuantizeCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "quantize IN.gguf OUT.gguf",
		Short: "Write a model in another type (f16, q8_0, q4_0, q4_k_m, ...) with llama.cpp's quantizer",
		Args:  cli.ExactArgs(2, "IN.gguf and OUT.gguf"),
	}
	fs := c.Flags()
	fs.SortFlags = false
	typ := fs.String("type", "q8_0", "file `TYPE`: "+strings.Join(llama.QuantizeTypes(), ", "))
	threads := fs.Int("threads", 0, "quantizer threads (0: one per CPU)")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		llama.Init(libDir())
		start := time.Now()
		res, err := llama.Quantize(cmd.Context(), args[0], args[1], llama.QuantizeOptions{Type: *typ, Threads: *threads})
		if err != nil {
			return err
		}
		how := "llama_model_quantize"
		if res.Fallback {
			how = fmt.Sprintf("ggml's row quantizer (llama.cpp refuses %s for rows that are not whole blocks; %d such weights kept in f16)", *typ, len(res.Kept))
		}
		fmt.Printf("wrote %s: %s, %s in %.1fs by %s\n", args[1], *typ, cli.Bytes(res.Bytes), time.Since(start).Seconds(), how)
		return nil
	}
	return c
}
