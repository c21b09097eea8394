package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/memosrt/memosrt/bench"
	"github.com/memosrt/memosrt/runtime/llama"
)

func cmdBench(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New("usage: memosrt bench ttft|recall ...")
	}
	switch args[0] {
	case "ttft":
		return benchTTFT(ctx, args[1:])
	case "recall":
		return benchRecall(ctx, args[1:])
	}
	return fmt.Errorf("unknown bench %q (ttft, recall)", args[0])
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("bad number %q in list %q", f, s)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("empty list %q", s)
	}
	return out, nil
}

func benchTTFT(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench ttft", flag.ContinueOnError)
	prefix := fs.String("prefix", "1024", "prefix lengths in tokens, comma-separated")
	query := fs.String("query", "", "query text (cut to --query-tokens)")
	qtok := fs.Int("query-tokens", 16, "query length, tokens")
	reps := fs.Int("reps", 5, "warm/floor repetitions (median reported)")
	asJSON := fs.Bool("json", false, "print a JSON array")
	ef := addEngineFlags(fs)
	if _, err := parse(fs, args); err != nil {
		return err
	}
	ns, err := parseInts(*prefix)
	if err != nil {
		return err
	}
	maxN := 0
	for _, n := range ns {
		maxN = max(maxN, n)
	}
	*ef.ctx = max(*ef.ctx, maxN+*qtok+64)
	eng, err := ef.load(ctx, 2)
	if err != nil {
		return err
	}
	defer eng.Close()
	o := bench.TTFTOptions{Prefixes: ns, Query: *query, QueryTok: *qtok, Reps: *reps}
	if isTerminal(os.Stderr) {
		o.OnProgress = func(s string) { fmt.Fprintf(os.Stderr, "\r\033[K%s", s) }
	}
	rows, err := bench.TTFT(ctx, eng, o)
	if o.OnProgress != nil {
		fmt.Fprint(os.Stderr, "\r\033[K")
	}
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(os.Stdout).Encode(rows)
	}
	sh := eng.Shape()
	dev := "cpu"
	for _, d := range llama.Devices() {
		if d.Kind == "gpu" && eng.Options().NGPULayers != 0 {
			dev = d.Description
		}
	}
	fmt.Printf("model %s (%s, %d layers), device %s, ngl %d, threads %d, KV %s/%s, v_trans %v\n\n",
		*ef.model, sh.Desc, sh.NLayer, dev, eng.Options().NGPULayers, eng.Options().Threads,
		eng.KVConfig().TypeK, eng.KVConfig().TypeV, eng.KVConfig().VTrans)
	fmt.Print(bench.TTFTTable(rows))
	return nil
}
