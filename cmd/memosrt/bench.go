package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/memosrt/memosrt/bench"
	"github.com/memosrt/memosrt/internal/cli"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/kvgate"
	"github.com/memosrt/memosrt/runtime/llama"
)

func newBenchCmd() *cobra.Command {
	return cli.Group("bench", "Benchmarks: TTFT with a restored KV prefix, retrieval recall on LoCoMo", newBenchTTFTCmd(), newBenchRecallCmd())
}

func newBenchTTFTCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "ttft",
		Short: "Time to first token: cold prefill vs a restored KV prefix, per prefix length",
		Args:  cli.NoArgs,
	}
	fs := c.Flags()
	fs.SortFlags = false
	prefix := fs.String("prefix", "1024", "prefix lengths in tokens, comma-separated `N[,N...]`")
	query := fs.String("query", "", "query `TEXT` (cut to --query-tokens)")
	qtok := fs.Int("query-tokens", 16, "query length, `TOKENS`")
	reps := fs.Int("reps", 5, "warm/floor repetitions `N` (median reported)")
	coldReps := fs.Int("cold-reps", 1, "cold prefill repetitions `N` (median reported; each in the JSON's cold_each_ms)")
	warmUp := fs.Bool("warmup", false, "run one untimed prefill of each prefix before the timed cold runs (as llama-bench does; default: the cold figure is the process's first prefill)")
	asJSON := fs.Bool("json", false, "print a JSON array")
	plot := fs.String("plot", "", "after the table (or JSON), draw TTFT against prefix length into `FILE.png` (or .svg)")
	codec := fs.String("kv-codec", "exact", "store the pack from Badger's row with `CODEC`: exact, q8 or q4 (lossy KV quantization, a format version 2 blob; the RAM row stays exact)")
	ef := addEngineFlags(fs)
	c.RunE = func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		if err := checkFlags(cmd, check{"query-tokens", *qtok >= 1, "1 or more"}, check{"reps", *reps >= 1, "1 or more"}, check{"cold-reps", *coldReps >= 1, "1 or more"}); err != nil {
			return err
		}
		if err := ef.check(cmd); err != nil {
			return err
		}
		if ext := strings.ToLower(filepath.Ext(*plot)); *plot != "" && ext != ".png" && ext != ".svg" {
			return fmt.Errorf("--plot %s: want a .png or .svg file", *plot)
		}
		var lossy *kvcache.LossyParams
		if p, ok := kvgate.Params(*codec); ok {
			lossy = &p
		} else if *codec != kvgate.CodecExact {
			return fmt.Errorf("--kv-codec %q: want exact, q8 or q4", *codec)
		}
		ns, err := cli.ParseInts(*prefix)
		if err != nil {
			return fmt.Errorf("--prefix: %w", err)
		}
		maxN := 0
		for _, n := range ns {
			maxN = max(maxN, n)
		}
		if need := maxN + *qtok + 64; need > *ef.ctx {
			*ef.ctx, ef.raisedCtx = need, true
		}
		eng, err := ef.load(ctx, 2)
		if err != nil {
			return err
		}
		defer eng.Close()
		ef.sayCapped(eng.NCtx())
		dir, err := os.MkdirTemp("", "memosrt-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		o := bench.TTFTOptions{Prefixes: ns, Query: *query, QueryTok: *qtok, Reps: *reps, ColdReps: *coldReps, WarmUp: *warmUp, Dir: dir, Lossy: lossy}
		if cli.IsTerminal(os.Stderr) {
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
			if err := json.NewEncoder(os.Stdout).Encode(rows); err != nil {
				return err
			}
			return plotTTFT(rows, *plot)
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
		return plotTTFT(rows, *plot)
	}
	return c
}

// plotTTFT writes bench ttft's picture to path ("": none).
func plotTTFT(rows []bench.TTFTRow, path string) error {
	if path == "" {
		return nil
	}
	if err := bench.PlotTTFT(rows, path); err != nil {
		return fmt.Errorf("--plot %s: %s", path, strings.TrimPrefix(err.Error(), "bench: PlotTTFT: "))
	}
	return nil
}
