package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/memosrt/memosrt/bench/recall"
	"github.com/memosrt/memosrt/embed"
)

func benchRecall(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench recall", flag.ContinueOnError)
	file := fs.String("locomo", "", "LoCoMo file in the official locomo10.json format")
	ks := fs.String("k", "5,10,25", "cut-offs k, comma-separated")
	asJSON := fs.Bool("json", false, "print one JSON object")
	ollamaHost := fs.String("ollama-host", "", "embed through Ollama's /api/embed at this URL (dense + lexical fusion)")
	ollamaModel := fs.String("embed-model", "", "Ollama embedding model (with --ollama-host)")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if *file == "" {
		return errors.New("--locomo FILE is required")
	}
	k, err := parseInts(*ks)
	if err != nil {
		return err
	}
	o := recall.Options{LoCoMo: *file, K: k, Logger: logger()}
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
