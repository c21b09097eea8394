package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/memosrt/memosrt/lora"
)

const loraUsage = "lora add|ls|rm|gen --db DIR [--cube NAME] ...\n" +
	"  lora add --db DIR [--cube NAME] [--default] [--replace] [--model PATH] NAME FILE.gguf\n" +
	"  lora ls --db DIR [--cube NAME|'*'] [--json]\n" +
	"  lora rm --db DIR [--cube NAME] NAME\n" +
	"  lora gen --model PATH --out FILE.gguf [--rank 4] [--std 0.05] [--seed N]   (random adapter, for tests)"

func cmdLora(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New("usage: memosrt " + loraUsage)
	}
	sub := args[0]
	fs := flag.NewFlagSet("lora "+sub, flag.ContinueOnError)
	sf := addStoreFlags(fs)
	cube := fs.String("cube", "", "cube the adapter belongs to (default: global)")
	def := fs.Bool("default", false, "attach to every request of its scope that lists no adapters")
	replace := fs.Bool("replace", false, "overwrite an adapter of the same name and scope")
	model := fs.String("model", envOr("MEMOSRT_MODEL", ""), "base model GGUF (or Ollama model name) to check the adapter against")
	asJSON := fs.Bool("json", false, "print JSON")
	out := fs.String("out", "", "output file (gen)")
	rank := fs.Int("rank", 4, "rank r (gen)")
	std := fs.Float64("std", 0.05, "standard deviation of B (gen)")
	seed := fs.Uint64("seed", 1, "seed (gen)")
	pos, err := parse(fs, args[1:])
	if err != nil {
		return err
	}
	if *model != "" {
		if *model, _, err = resolveModel(*model); err != nil {
			return err
		}
	}
	if sub == "gen" {
		if *model == "" || *out == "" {
			return errors.New("lora gen needs --model and --out")
		}
		if err := lora.WriteRandom(ctx, *out, *model, lora.RandomSpec{Rank: *rank, Std: float32(*std), Seed: *seed}); err != nil {
			return err
		}
		fmt.Printf("wrote %s (rank %d, attn_q and attn_v of every block)\n", *out, *rank)
		return nil
	}
	if r, ok := runningServer(*sf.db); ok && *sf.db != "" {
		return fmt.Errorf("memosrt serve is running on %s (%s): stop it to change or list adapters (the server loads LoRA support at start)", *sf.db, r.info.URL)
	}
	o, err := sf.openOS(ctx, nil)
	if err != nil {
		return err
	}
	defer o.Close(context.WithoutCancel(ctx))
	reg := o.AdapterRegistry()
	switch sub {
	case "add":
		if len(pos) != 2 {
			return errors.New("usage: memosrt lora add --db DIR [--cube NAME] NAME FILE.gguf")
		}
		req := lora.AddRequest{Name: pos[0], Cube: *cube, Path: pos[1], Default: *def, Replace: *replace}
		if *model != "" {
			b, err := lora.ReadBase(*model)
			if err != nil {
				return err
			}
			req.Base = &b
		}
		rec, err := reg.Add(ctx, req)
		if err != nil {
			return err
		}
		if *asJSON {
			return json.NewEncoder(os.Stdout).Encode(rec)
		}
		fmt.Printf("added %s: rank %d, alpha %g, %d tensors adapted, %s\n", scope(rec), rec.Rank, rec.Alpha, len(rec.Targets), bytesStr(rec.Bytes))
		return nil
	case "ls":
		recs, err := reg.List(ctx, *cube)
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
			fmt.Fprintf(tw, "%s\t%s\t%d\t%g\t%s\t%v\t%.12s\t%s\n", r.Name, c, r.Rank, r.Alpha, bytesStr(r.Bytes), r.Default, r.SHA256, r.Path)
		}
		return tw.Flush()
	case "rm":
		if len(pos) != 1 {
			return errors.New("usage: memosrt lora rm --db DIR [--cube NAME] NAME")
		}
		if err := reg.Remove(ctx, *cube, pos[0]); err != nil {
			return err
		}
		fmt.Printf("removed %s\n", scope(lora.Record{Name: pos[0], Cube: *cube}))
		return nil
	default:
		return fmt.Errorf("unknown lora command %q (add, ls, rm, gen)", sub)
	}
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
