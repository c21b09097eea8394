package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/memosrt/memosrt/bench/recall"
	"github.com/memosrt/memosrt/embed"
)

func newBenchRecallCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "recall",
		Short: "Retrieval recall@k on LoCoMo (lexical, or dense + lexical fusion through Ollama)",
		Args:  noArgs,
	}
	fs := c.Flags()
	fs.SortFlags = false
	file := fs.String("locomo", "", "LoCoMo `FILE` in the official locomo10.json format")
	ks := fs.String("k", "5,10,25", "cut-offs k, comma-separated `K[,K...]`")
	asJSON := fs.Bool("json", false, "print one JSON object")
	ollamaHost := fs.String("ollama-host", "", "embed through Ollama's /api/embed at this `URL` (dense + lexical fusion)")
	ollamaModel := fs.String("embed-model", "", "Ollama embedding `MODEL` (with --ollama-host)")
	mode := fs.String("mode", recall.ModeFlat, "`MODE`: flat (turns stored as memories) or sessions (turns fed through the chat API and recorded; flat beside it)")
	model := fs.String("model", "", "GGUF model file `PATH` that --mode sessions chats with, answers discarded (default $MEMOSRT_MODEL)")
	threads := fs.Int("threads", 2, "CPU threads `N` of --mode sessions' engine")
	envDefault(fs, "model", "MEMOSRT_MODEL")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		if *file == "" {
			return errors.New("--locomo FILE is required")
		}
		k, err := parseInts(*ks)
		if err != nil {
			return fmt.Errorf("--k: %w", err)
		}
		if *mode != recall.ModeFlat && *mode != recall.ModeSessions {
			return fmt.Errorf("--mode %q: want %s or %s", *mode, recall.ModeFlat, recall.ModeSessions)
		}
		if *mode == recall.ModeSessions && *model == "" {
			return errors.New("--mode sessions needs --model PATH")
		}
		if *threads < 1 || *threads > 512 {
			return fmt.Errorf("--threads %d: want 1 to 512", *threads)
		}
		o := recall.Options{LoCoMo: *file, K: k, Logger: logger(), Mode: *mode, Model: *model, Threads: *threads}
		if *ollamaHost != "" {
			e, err := embed.NewOllama(ctx, embed.OllamaOptions{URL: *ollamaHost, Model: *ollamaModel})
			if err != nil {
				return err
			}
			o.Embedder = e
		}
		rep, err := recall.Run(ctx, o)
		if err != nil {
			return err
		}
		if *asJSON {
			return json.NewEncoder(os.Stdout).Encode(rep)
		}
		fmt.Print(rep.Table())
		return nil
	}
	return c
}
