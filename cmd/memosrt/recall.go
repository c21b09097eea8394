package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/memosrt/memosrt/bench/recall"
	"github.com/memosrt/memosrt/embed"
	"github.com/memosrt/memosrt/embed/llamaembed"
	"github.com/memosrt/memosrt/internal/cli"
)

func newBenchRecallCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "recall",
		Short: "Retrieval recall@k on LoCoMo (lexical, or dense + lexical fusion with an embedding model)",
		Args:  cli.NoArgs,
	}
	fs := c.Flags()
	fs.SortFlags = false
	file := fs.String("locomo", "", "LoCoMo `FILE` in the official locomo10.json format")
	ks := fs.String("k", "5,10,25", "cut-offs k, comma-separated `K[,K...]`")
	asJSON := fs.Bool("json", false, "print one JSON object")
	ollamaHost := fs.String("ollama-host", "", "embed through Ollama's /api/embed at this `URL` (dense + lexical fusion)")
	embedModel := fs.String("embed-model", "", "embedding `MODEL` (dense + lexical fusion): with --ollama-host the Ollama server's; else a GGUF file or an Ollama NAME[:TAG] in $OLLAMA_MODELS, run in process as serve --embed-model")
	mode := fs.String("mode", recall.ModeFlat, "`MODE`: flat (turns stored as memories) or sessions (turns fed through the chat API and recorded; flat beside it)")
	model := fs.String("model", "", "GGUF model file `PATH` that --mode sessions chats with, answers discarded (default $MEMOSRT_MODEL)")
	threads := fs.Int("threads", 2, "CPU threads `N` of --mode sessions' engine and of an in-process --embed-model")
	envDefault(fs, "model", "MEMOSRT_MODEL")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		if *file == "" {
			return errors.New("--locomo FILE is required")
		}
		k, err := cli.ParseInts(*ks)
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
		switch {
		case *ollamaHost != "":
			e, err := embed.NewOllama(ctx, embed.OllamaOptions{URL: *ollamaHost, Model: *embedModel})
			if err != nil {
				return err
			}
			o.Embedder = e
		case *embedModel != "":
			path, _, err := resolveModel(*embedModel)
			if err != nil {
				return fmt.Errorf("--embed-%w", err) // resolveModel's errors start with "model"
			}
			l, err := llamaembed.Open(ctx, path, llamaembed.Options{Threads: *threads, LibDir: libDir()})
			if err != nil {
				return fmt.Errorf("--embed-model %s: %w", *embedModel, err)
			}
			defer l.Close()
			o.Embedder = l
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
