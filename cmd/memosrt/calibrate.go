package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/memosrt/memosrt/internal/cli"
	"github.com/memosrt/memosrt/kvgate"
	"github.com/memosrt/memosrt/runtime"
)

func newCalibrateCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "calibrate",
		Short: "Measure composition and lossy KV codecs against full prefill on a model's own text (the calibration gate)",
		Long: `Measure, as serve's calibration gate does for a model, how composed KV
(recompute fractions 0 to the ceiling) and lossy packs (q4, q8) agree with
a full prefill: top-1 next-token agreement and whole greedy paths, on
samples of the model's own greedy text. Prints the table and the choices:
the smallest fraction meeting the targets (else composition off) and the
codec --kv-codec auto would store with (the smallest passing, else exact).`,
		Args: cli.NoArgs,
	}
	fs := c.Flags()
	fs.SortFlags = false
	compose := fs.Bool("compose", false, "calibrate composition's recompute fraction")
	codec := fs.String("kv-codec", "auto", "codec `SETTING` to decide: exact (no codec rows), auto, q8 or q4")
	targets := fs.String("targets", "top1=0.99,greedy=0.90,ceiling=0.40", "`LIST` of top1, greedy (shares of 1) and ceiling (largest fraction)")
	samples := fs.Int("samples", 12, "calibration samples `N`")
	asJSON := fs.Bool("json", false, "print the decision as JSON")
	ef := addEngineFlags(fs)
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if err := ef.check(cmd); err != nil {
			return err
		}
		t, err := parseTargets(*targets)
		if err != nil {
			return fmt.Errorf("--targets: %w", err)
		}
		if err := checkFlags(cmd, check{"samples", *samples >= 1 && *samples <= 1000, "1 to 1000"}); err != nil {
			return err
		}
		gopts := kvgate.GateOptions{Codec: *codec, Compose: *compose, Targets: t, Samples: kvgate.Samples{N: *samples}}
		if err := gopts.Validate(); err != nil {
			return err
		}
		if !*compose && *codec == kvgate.CodecExact {
			return fmt.Errorf("nothing to calibrate: give --compose, or --kv-codec auto, q8 or q4")
		}
		return calibrate(cmd.Context(), ef, gopts, *asJSON)
	}
	return c
}

// parseTargets reads "top1=0.99,greedy=0.90,ceiling=0.40" (any subset).
func parseTargets(s string) (kvgate.Targets, error) {
	var t kvgate.Targets
	for _, kv := range strings.Split(s, ",") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if !ok || err != nil || f <= 0 || f > 1 {
			return t, fmt.Errorf("%q: want NAME=SHARE with a share in (0, 1]", kv)
		}
		switch strings.TrimSpace(k) {
		case "top1":
			t.Top1 = f
		case "greedy":
			t.Greedy = f
		case "ceiling":
			t.Ceiling = f
		default:
			return t, fmt.Errorf("%q: unknown target (top1, greedy, ceiling)", k)
		}
	}
	return t, nil
}

func calibrate(ctx context.Context, ef engineFlags, gopts kvgate.GateOptions, asJSON bool) error {
	o, _, err := ef.engineOptions()
	if err != nil {
		return err
	}
	o.NSeqMax, o.BlendProbe = 4, gopts.Compose
	eng, err := runtime.Load(ctx, o)
	if err != nil {
		return err
	}
	defer eng.Close()
	ef.sayCapped(eng.NCtx())
	g, err := kvgate.Open(nil, gopts)
	if err != nil {
		return err
	}
	defer g.Close()
	key := kvgate.Key(eng.KVConfig(), "")
	d, err := g.Calibrate(ctx, key, eng)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetEscapeHTML(false)
		return enc.Encode(d)
	}
	chosen, _ := g.Codec(key)
	printDecision(d, chosen)
	return nil
}

// printDecision prints a decision's table and choices; chosen is the
// codec packs are stored with under the gate's setting.
func printDecision(d kvgate.Decision, chosen string) {
	t := d.Targets
	fmt.Printf("model %s: %d samples, targets top-1 >= %.1f%%, greedy %d tokens >= %.1f%%, ceiling %.2f (%.1f s)\n",
		d.Key, d.Samples.N, 100*t.Top1, d.Samples.Greedy, 100*t.Greedy, t.Ceiling, d.Took)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "setting\tfraction\trecomputed\ttop-1\tgreedy\tsize ratio\tpass\t")
	var errs []string
	// figures returns a row's top-1, greedy and pass columns ("-" and
	// "n/a" for a setting that could not be measured)
	figures := func(r kvgate.Row, name string) (string, string, string) {
		if r.Err != "" {
			errs = append(errs, name+": "+r.Err)
			return "-", "-", "n/a"
		}
		return fmt.Sprintf("%.1f%%", 100*r.Top1), fmt.Sprintf("%.1f%%", 100*r.Greedy), map[bool]string{true: "yes", false: "no"}[r.Pass]
	}
	for _, r := range d.Compose {
		top1, greedy, pass := figures(r, fmt.Sprintf("compose %.2f", r.Fraction))
		fmt.Fprintf(w, "compose\t%.2f\t%.1f%%\t%s\t%s\t-\t%s\t\n", r.Fraction, 100*r.Recomputed, top1, greedy, pass)
	}
	for _, r := range d.Codecs {
		top1, greedy, pass := figures(r, r.Setting)
		ratio := "-"
		if r.Err == "" {
			ratio = fmt.Sprintf("%.2fx", r.Ratio)
		}
		fmt.Fprintf(w, "%s\t-\t-\t%s\t%s\t%s\t%s\t\n", r.Setting, top1, greedy, ratio, pass)
	}
	w.Flush()
	for _, e := range errs {
		fmt.Println("not measured:", e)
	}
	if d.Composed {
		if d.ComposeOn {
			fmt.Printf("composition: on, recompute fraction %.2f\n", d.Ratio)
		} else {
			fmt.Printf("composition: off (no fraction up to %.2f meets the targets)\n", t.Ceiling)
		}
	}
	if d.Codec != "" {
		ratio := 0.0
		for _, r := range d.Codecs {
			if r.Setting == chosen {
				ratio = r.Ratio
			}
		}
		fmt.Printf("kv codec: %s stored (size ratio %.2fx); auto chooses %s\n", chosen, ratio, d.Codec)
	}
}
