package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/memosrt/memosrt/internal/cli"
)

func newTiersCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "tiers",
		Short: "A cube's memory tiers, heat, pack, pending jobs and transitions",
		Args:  cli.NoArgs,
	}
	fs := c.Flags()
	fs.SortFlags = false
	sf := addStoreFlags(fs)
	cube := addCubeFlag(fs, "memory cube `NAME` (required unless --tick)")
	limit := fs.Int("limit", 20, "transitions to show (`N`, 0: all)")
	asJSON := fs.Bool("json", false, "print JSON")
	tick := fs.Bool("tick", false, "run one scheduler tick first (plans and runs pending jobs; needs --model, or a running server)")
	ef := addEngineFlags(fs)
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if *cube == "" && !*tick {
			return errors.New("--cube is required (or --tick alone to run one scheduler tick)")
		}
		if err := checkCube(*cube, false); err != nil {
			return err
		}
		if err := checkFlags(cmd, check{"limit", *limit >= 0, "0 (all) or more"}); err != nil {
			return err
		}
		if err := ef.check(cmd); err != nil {
			return err
		}
		return tiers(cmd.Context(), sf, ef, *cube, *limit, *asJSON, *tick)
	}
	return c
}

func tiers(ctx context.Context, sf storeFlags, ef engineFlags, cube string, limit int, asJSON, tick bool) error {
	sf.existing = true
	var e *engineFlags
	if tick {
		e = &ef
	}
	s, err := sf.open(ctx, e)
	if err != nil {
		return err
	}
	defer s.Close(context.WithoutCancel(ctx))
	if tick {
		rep, err := s.Tick(ctx)
		fmt.Fprintf(os.Stderr, "tick: %d planned, %d done, %d failed\n", rep.Planned, rep.Done, rep.Failed)
		if err != nil {
			return err
		}
		if cube == "" {
			return nil
		}
	}
	st, err := s.Tiers(ctx, cube, limit)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetEscapeHTML(false)
		return enc.Encode(st)
	}
	fmt.Printf("cube %s: pack %d tokens, %s KV (%s stored), level %s; all packs %s of %s budget\n", st.Cube, st.PackTokens,
		cli.Bytes(st.RawBytes), cli.Bytes(st.BlobBytes), orDash(st.PackLevel), cli.Bytes(st.KVBytes), cli.Bytes(st.KVBudget))
	if c := st.PackComposed; c != nil {
		fmt.Printf("pack composed from its members' chunks (approximate): %d tokens at [%d, %d), %d recomputed (fraction %.2f)\n",
			c.Tokens, c.First, c.First+c.Tokens, c.Recomputed, c.Ratio)
	}
	if g := st.KVGate; g != nil {
		state := "not calibrated yet: exact"
		switch {
		case g.Setting == "exact":
			state = "packs stored exact"
		case g.Calibrated:
			compose := "off"
			if g.Compose {
				compose = fmt.Sprintf("on at %.2f", g.ComposeRatio)
			}
			state = fmt.Sprintf("calibrated: packs stored %s, composition %s", g.Codec, compose)
		}
		fmt.Printf("kv codec %s (pack %s): %s\n", g.Setting, orDash(st.PackCodec), state)
		if d := g.Decision; d != nil {
			printDecision(*d, g.Codec)
		}
	}
	if pm := st.Parametric; pm != nil && (pm.Adapter != "" || pm.Failure != "" || pm.Distilling) {
		fmt.Printf("parametric: adapter %s (version %d, %d memories, %s, base %s)", orDash(pm.Adapter), pm.Version, pm.Members, cli.Bytes(pm.Bytes), orDash(pm.BaseType))
		if ev := pm.Eval; ev != nil {
			fmt.Printf(", memory NLL %.3f → %.3f (−%.0f%%), recalled %d/%d, generic top-1 %.1f%% KL %.4f",
				ev.NLLBase, ev.NLLAdapter, 100*ev.NLLDrop(), ev.Recalled, ev.Memories, 100*ev.Top1, ev.KL)
		}
		if pm.Distilling {
			fmt.Print(", distilling now")
		}
		if pm.Failure != "" {
			fmt.Printf("; last run not attached: %s", pm.Failure)
		}
		fmt.Println()
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMORY\tTIER\tHEAT\tVISITS\tTURNS\tTEXT")
	for _, m := range st.Memories {
		tier := m.Tier
		if m.Pinned {
			tier += " (pinned)"
		}
		if m.Chunk != "" {
			tier += " +chunk"
		}
		fmt.Fprintf(tw, "%s\t%s\t%.3f\t%.2f\t%.2f\t%s\n", m.ID, tier, m.Heat, m.Usage.Visits, m.Usage.Interactions, cli.OneLine(m.Text, 48))
	}
	tw.Flush()
	if len(st.Jobs) > 0 {
		fmt.Println("\npending jobs:")
		for _, j := range st.Jobs {
			fmt.Printf("  %d %s %s (%s, heat %.3f)\n", j.Seq, j.Kind, j.Memory, j.Reason, j.Heat)
		}
	}
	if len(st.Transitions) > 0 {
		fmt.Println("\ntransitions:")
		tw = tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TIME\tMEMORY\tFROM\tTO\tREASON\tHEAT\tTOKENS\tDECODED")
		for _, tr := range st.Transitions {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.3f\t%d\t%d\n", tr.Time.Format("2006-01-02 15:04:05"), orDash(tr.Memory), tr.From, tr.To, tr.Reason, tr.Heat, tr.Tokens, tr.Decoded)
		}
		tw.Flush()
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
