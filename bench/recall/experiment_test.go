package recall

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/memosrt/memosrt/embed"
	"github.com/memosrt/memosrt/textmem"
)

// TestExperiments measures configuration variants on MEMOSRT_LOCOMO when
// MEMOSRT_EXPERIMENTS is set. It is how the defaults were chosen.
func TestExperiments(t *testing.T) {
	path := os.Getenv("MEMOSRT_LOCOMO")
	if path == "" || os.Getenv("MEMOSRT_EXPERIMENTS") == "" {
		t.Skip("MEMOSRT_LOCOMO or MEMOSRT_EXPERIMENTS not set")
	}
	samples, err := loadLoCoMo(path)
	if err != nil {
		t.Fatal(err)
	}
	ks := []int{5, 10, 25}
	run := func(name string, c config) {
		res, err := measure(context.Background(), samples, c, ks, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		tab := res.table(ks)
		var b strings.Builder
		fmt.Fprintf(&b, "%-40s", name)
		for _, key := range []string{"1", "2", "3", "4", "5", "overall"} {
			fmt.Fprintf(&b, " %s:%5.1f", key, tab[key]["10"])
		}
		fmt.Fprintf(&b, " | @5 %.1f @25 %.1f", tab["overall"]["5"], tab["overall"]["25"])
		t.Log(b.String())
	}
	base := systemConfig(nil)
	for _, v := range strings.Split(os.Getenv("MEMOSRT_EXPERIMENTS"), ";") {
		c := base
		c.query = textmem.Query{}
		if v == "default" {
			c.query = textmem.DefaultQuery("", 0)
		}
		var ok bool
		c, ok = variant(c, v)
		if !ok {
			t.Fatalf("unknown variant %q", v)
		}
		run(v, c)
	}
}

// variant applies comma-separated settings name=value to c.
func variant(c config, spec string) (config, bool) {
	for _, kv := range strings.Split(spec, ",") {
		if kv == "" || kv == "sys" || kv == "default" {
			continue
		}
		name, val, _ := strings.Cut(kv, "=")
		var f float64
		fmt.Sscan(val, &f)
		switch name {
		case "plain":
			c.analyzer = textmem.PlainAnalyzer{}
		case "nospeaker":
			c.speaker = false
		case "nodate":
			c.date = false
		case "k1":
			c.k1 = f
		case "b":
			c.b = f
		case "tc":
			c.query.TemporalCues = f
		case "fb":
			c.query.Feedback = int(f)
		case "fbt":
			c.query.FeedbackTerms = int(f)
		case "fbw":
			c.query.FeedbackWeight = f
		case "ctx":
			c.query.ContextWeight = f
		case "nb":
			c.query.Neighbors = int(f)
		case "nbd":
			c.query.NeighborDecay = f
		case "hash":
			h, err := embed.NewHash(int(f))
			if err != nil {
				return c, false
			}
			c.embedder = h
		case "dw":
			c.query.DenseWeight = f
		default:
			return c, false
		}
	}
	return c, true
}
