package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/internal/cli"
	"github.com/memosrt/memosrt/internal/serveclient"
	"github.com/memosrt/memosrt/lora"
)

func newLoraCmd() *cobra.Command {
	return cli.Group("lora", "Parametric tier: LoRA adapters, global or per cube",
		newLoraAddCmd(), newLoraLsCmd(), newLoraRmCmd(), newLoraGenCmd())
}

// loraModelFlag adds --model (default $MEMOSRT_MODEL) with usage u.
func loraModelFlag(fs *pflag.FlagSet, u string) *string {
	m := fs.String("model", "", u+" (default $MEMOSRT_MODEL)")
	envDefault(fs, "model", "MEMOSRT_MODEL")
	return m
}

// loraRegistry opens the data directory for the adapter commands (never
// through a running server: it loads LoRA support at start).
func loraRegistry(ctx context.Context, sf storeFlags) (*memosrt.OS, error) {
	if r, ok := serveclient.Find(*sf.db); ok && *sf.db != "" {
		return nil, fmt.Errorf("memosrt serve is running on %s (%s): stop it to change or list adapters (the server loads LoRA support at start)", *sf.db, r.URL())
	}
	return sf.openOS(ctx, nil)
}

func newLoraAddCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "add NAME FILE.gguf",
		Short: "Register a LoRA adapter (GGUF) under NAME, globally or for a cube",
		Args:  cli.ExactArgs(2, "NAME and FILE.gguf"),
	}
	fs := c.Flags()
	fs.SortFlags = false
	sf := addStoreFlags(fs)
	cube := addCubeFlag(fs, "cube `NAME` the adapter belongs to (default: global)")
	def := fs.Bool("default", false, "attach to every request of its scope that lists no adapters")
	replace := fs.Bool("replace", false, "overwrite an adapter of the same name and scope")
	model := loraModelFlag(fs, "base model GGUF `PATH` (or Ollama model NAME[:TAG]) to check the adapter against")
	asJSON := fs.Bool("json", false, "print JSON")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		if err := checkCube(*cube, false); err != nil {
			return err
		}
		req := lora.AddRequest{Name: args[0], Cube: *cube, Path: args[1], Default: *def, Replace: *replace}
		if *model != "" {
			path, _, err := resolveModel(*model)
			if err != nil {
				return err
			}
			b, err := lora.ReadBase(path)
			if err != nil {
				return err
			}
			req.Base = &b
		}
		o, err := loraRegistry(ctx, sf)
		if err != nil {
			return err
		}
		defer o.Close(context.WithoutCancel(ctx))
		rec, err := o.AdapterRegistry().Add(ctx, req)
		if err != nil {
			return err
		}
		if *asJSON {
			return json.NewEncoder(os.Stdout).Encode(rec)
		}
		fmt.Printf("added %s: rank %d, alpha %g, %d tensors adapted, %s\n", scope(rec), rec.Rank, rec.Alpha, len(rec.Targets), cli.Bytes(rec.Bytes))
		return nil
	}
	return c
}

func newLoraLsCmd() *cobra.Command {
	c := &cobra.Command{Use: "ls", Short: "List the registered LoRA adapters", Args: cli.NoArgs}
	fs := c.Flags()
	fs.SortFlags = false
	sf := addStoreFlags(fs)
	cube := addCubeFlag(fs, "the adapters visible from cube `NAME` (its own, then the global ones it does not shadow); '*': every scope (default: the global ones)")
	asJSON := fs.Bool("json", false, "print JSON")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		o, err := loraRegistry(ctx, sf)
		if err != nil {
			return err
		}
		defer o.Close(context.WithoutCancel(ctx))
		recs, err := o.AdapterRegistry().List(ctx, *cube)
		if err != nil {
			return err
		}
		if *asJSON {
			if recs == nil {
				recs = []lora.Record{}
			}
			return json.NewEncoder(os.Stdout).Encode(recs)
		}
		tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tCUBE\tRANK\tALPHA\tSIZE\tDEFAULT\tSHA256\tPATH")
		for _, r := range recs {
			c := r.Cube
			if c == "" {
				c = "*"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%g\t%s\t%v\t%.12s\t%s\n", r.Name, c, r.Rank, r.Alpha, cli.Bytes(r.Bytes), r.Default, r.SHA256, r.Path)
		}
		return tw.Flush()
	}
	return c
}

func newLoraRmCmd() *cobra.Command {
	c := &cobra.Command{Use: "rm NAME", Short: "Remove a registered LoRA adapter", Args: cli.ExactArgs(1, "one NAME argument")}
	fs := c.Flags()
	fs.SortFlags = false
	sf := addStoreFlags(fs)
	cube := addCubeFlag(fs, "cube `NAME` the adapter belongs to (default: global)")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		if err := checkCube(*cube, false); err != nil {
			return err
		}
		o, err := loraRegistry(ctx, sf)
		if err != nil {
			return err
		}
		defer o.Close(context.WithoutCancel(ctx))
		if err := o.AdapterRegistry().Remove(ctx, *cube, args[0]); err != nil {
			return err
		}
		fmt.Printf("removed %s\n", scope(lora.Record{Name: args[0], Cube: *cube}))
		return nil
	}
	return c
}

func newLoraGenCmd() *cobra.Command {
	c := &cobra.Command{Use: "gen", Short: "Write a random LoRA adapter for a model (tests)", Args: cli.NoArgs}
	fs := c.Flags()
	fs.SortFlags = false
	model := loraModelFlag(fs, "base model GGUF `PATH` (or Ollama model NAME[:TAG])")
	out := fs.String("out", "", "output `FILE.gguf`")
	rank := fs.Int("rank", 4, "rank `R`")
	std := fs.Float64("std", 0.05, "standard deviation of B")
	seed := fs.Uint64("seed", 1, "seed")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if *model == "" || *out == "" {
			return errors.New("lora gen needs --model and --out")
		}
		if err := checkFlags(cmd, check{"rank", *rank >= 1, "1 or more"}, check{"std", *std >= 0, "0 or more"}); err != nil {
			return err
		}
		path, _, err := resolveModel(*model)
		if err != nil {
			return err
		}
		if err := lora.WriteRandom(cmd.Context(), *out, path, lora.RandomSpec{Rank: *rank, Std: float32(*std), Seed: *seed}); err != nil {
			return err
		}
		fmt.Printf("wrote %s (rank %d, attn_q and attn_v of every block)\n", *out, *rank)
		return nil
	}
	return c
}

func scope(r lora.Record) string {
	if r.Cube == "" {
		return r.Name + " (global)"
	}
	return r.Name + " (cube " + r.Cube + ")"
}

// loraFlag collects repeated --lora NAME[:SCALE] values; "none" (or "")
// turns every adapter off, including the cube's defaults.
type loraFlag struct {
	set   bool
	specs []lora.Spec
}

func (f *loraFlag) String() string {
	var s []string
	for _, x := range f.specs {
		s = append(s, x.String())
	}
	return strings.Join(s, ",")
}

func (f *loraFlag) Set(v string) error {
	specs, err := lora.ParseSpecs(v)
	if err != nil {
		return err
	}
	if !f.set {
		f.specs = []lora.Spec{}
	}
	f.set = true
	f.specs = append(f.specs, specs...)
	return nil
}

// none reports --lora none: no adapter at all.
func (f *loraFlag) none() bool { return f.set && len(f.specs) == 0 }

// adapterSpecs returns nil (the cube's default adapters) when --lora was not
// given, else the listed ones (empty: none).
func (f *loraFlag) adapterSpecs() []lora.Spec {
	if !f.set {
		return nil
	}
	return f.specs
}

// Type is the flag's value type in pflag's messages.
func (f *loraFlag) Type() string { return "NAME[:SCALE]" }
