package memosrt

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/memosrt/memosrt/internal/stats"
)

// BenchmarkTurnRecording measures what recording a chat turn (issue 17:
// the turn stored as a memory of Kind KindTurn, queued short-term, moved
// into a topic session on overflow) adds to a chat request on
// stories260K: the same chat request (a cube of three memories, a user
// message that differs in a number from request to request, so that no
// turn is an identical add answered by textmem's duplicate check, 8
// tokens, NoPersist) with Record RecordTurn and with
// RecordNone, alternated request by request so that both see the same
// machine and the same cube, the order flipped every pair (RecordTurn
// first, then RecordNone first) so that neither always follows the other.
// Warm-up pairs run first, unmeasured: every recorded turn is a memory the
// prompt's retrieval may add, so the prompts settle once retrieval is
// full (Layout.RetrieveK). Extraction jobs are off (NoExtract): they run in
// the background, off the request path. Reports the p50 of each,
// record_p50_ms and none_p50_ms, and the p50 of the paired differences,
// diff_p50_ms (issue 17's bar: <= 1 ms).
//
//	go test -run '^$' -bench TurnRecording -benchtime 400x .
func BenchmarkTurnRecording(b *testing.B) {
	const warm = 20
	ctx := context.Background()
	opts := testOptions(b, b.TempDir())
	opts.Parallel = 1
	opts.NoPersist = true
	opts.NoExtract = true
	o := openOS(b, opts)
	addMemories(b, o, "c", "Lily has a dog named Max.", "Max likes to run in the park.", "Lily's favourite food is apple pie.")
	recorded, n := 0, 0
	chat := func(mode RecordMode) float64 {
		n++
		req := Request{Cube: "c", Messages: []Message{{Role: "user", Content: fmt.Sprintf("Once upon a time, Lily found %d shells", n)}},
			NumPredict: 8, NoPersist: true, Record: mode}
		start := time.Now()
		if _, err := o.Chat(ctx, req); err != nil {
			b.Fatal(err)
		}
		d := time.Since(start)
		if mode == RecordTurn {
			recorded++
		}
		return float64(d.Nanoseconds()) / 1e6
	}
	for range warm {
		chat(RecordTurn)
		chat(RecordNone)
	}
	var rec, none, diff []float64
	b.ResetTimer()
	for i := range b.N {
		var r, n float64
		if i%2 == 0 {
			r, n = chat(RecordTurn), chat(RecordNone)
		} else {
			n, r = chat(RecordNone), chat(RecordTurn)
		}
		rec, none, diff = append(rec, r), append(none, n), append(diff, r-n)
	}
	b.StopTimer()

	// Every RecordTurn request left one turn, no RecordNone request any.
	st, err := o.ShortTerm(ctx, "c")
	if err != nil {
		b.Fatal(err)
	}
	ses, err := o.Sessions(ctx, "c")
	if err != nil {
		b.Fatal(err)
	}
	turns := len(st)
	for _, s := range ses {
		turns += len(s.Turns)
	}
	if turns != recorded {
		b.Fatalf("%d turns recorded (short-term %d, %d sessions), want %d", turns, len(st), len(ses), recorded)
	}
	b.ReportMetric(stats.Median(slices.Clone(rec)), "record_p50_ms")
	b.ReportMetric(stats.Median(slices.Clone(none)), "none_p50_ms")
	b.ReportMetric(stats.Median(diff), "diff_p50_ms")
}
