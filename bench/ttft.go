package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/memosrt/memosrt/datadir"

	"github.com/memosrt/memosrt/internal/stats"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/runtime"
)

// TTFTOptions configure TTFT.
type TTFTOptions struct {
	Prefixes []int  // prefix lengths, tokens
	Query    string // query text; its tokens are cut or padded to QueryTokens
	QueryTok int    // query length, tokens (default 16)
	Reps     int    // repetitions of the warm and floor runs; median reported (default 5)
	ColdReps int    // repetitions of the cold run (default 1)
	// WarmUp runs one untimed prefill of each prefix + query (then clears
	// the sequence) before the timed cold runs, as llama-bench runs a
	// warm-up before its timed runs: the cold figure is then a prefill's
	// own cost, without what the process's first prefill pays once
	// (first touch of the compute buffers). Default false: the cold
	// figure is the process's first prefill of that length.
	WarmUp bool
	// Dir, when set, is a scratch directory for a Badger database: the
	// from-disk row then stores the pack through kvcache (as the OS does)
	// and restores it with the RAM cache dropped (read from Badger, decode,
	// restore); without it, the blob is decoded from memory.
	Dir string
	// Lossy, when set, stores the pack (in Badger, or the in-memory blob)
	// with that KV quantization (a format version 2 blob, dequantized on
	// restore: kvcache.Header.Lossy); the RAM row still restores the exact
	// state. nil: exact.
	Lossy      *kvcache.LossyParams
	OnProgress func(string)
}

// TTFTRow is one prefix length's result. Times in milliseconds.
type TTFTRow struct {
	Prefix         int       `json:"prefix"`            // tokens restored/held
	Query          int       `json:"query"`             // tokens decoded after the prefix
	ColdMs         float64   `json:"cold_ttft_ms"`      // prefill of prefix+query, first token sampled
	ColdEachMs     []float64 `json:"cold_each_ms"`      // each cold run in order (ColdReps of them; ColdMs is their median)
	WarmMs         float64   `json:"warm_ttft_ms"`      // restore the prefix state from RAM + decode query
	WarmDiskMs     float64   `json:"warm_disk_ttft_ms"` // restore from Badger (Dir set) or the blob in memory, + decode query
	WarmDiskEachMs []float64 `json:"warm_disk_each_ms"` // each of them in order (Reps; the first restore from Badger in a process also faults in its buffer)
	DiskFrom       string    `json:"warm_disk_from"`    // "badger" or "blob"
	FloorMs        float64   `json:"floor_ms"`          // query decoded on a sequence already holding the prefix
	FloorEachMs    []float64 `json:"floor_each_ms"`     // each floor in order (Reps)
	RestoreMs      float64   `json:"restore_ms"`        // the restore alone (RAM)
	ColdOverW      float64   `json:"cold_over_warm"`
	WarmOverF      float64   `json:"warm_over_floor"`
	StateBytes     int64     `json:"state_bytes"`
	BlobBytes      int64     `json:"blob_bytes"`
	Compression    float64   `json:"compression_ratio"`
}

const benchText = "The history of the city begins with a small settlement on the river, where traders met to exchange grain, salt and cloth. Over the centuries the market grew into a town, the town into a city, and the city into the capital of a region known for its bridges, its libraries and its long winters. "

// Tokens returns n tokens of plain text for the engine's vocabulary.
func Tokens(e *runtime.Engine, n int, bos bool) ([]int32, error) {
	text := benchText
	for {
		toks, err := e.Tokenize(text, bos)
		if err != nil {
			return nil, err
		}
		if len(toks) >= n {
			return toks[:n], nil
		}
		text += benchText
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

// TTFT measures, for each prefix length N, cold prefill TTFT, warm TTFT
// (restore the prefix's KV state, decode only the query) and the floor
// (decode only the query on a sequence that already holds the prefix) in one
// run on one engine, on its sequence 0, which needs NCtx >= N + query + 1.
func TTFT(ctx context.Context, e *runtime.Engine, o TTFTOptions) ([]TTFTRow, error) {
	if o.QueryTok == 0 {
		o.QueryTok = 16
	}
	if o.Reps == 0 {
		o.Reps = 5
	}
	if o.ColdReps == 0 {
		o.ColdReps = 1
	}
	if o.Query == "" {
		o.Query = "Which of these details matters most for the traders who met on the river, and why?"
	}
	say := func(f string, a ...any) {
		if o.OnProgress != nil {
			o.OnProgress(fmt.Sprintf(f, a...))
		}
	}
	query, err := e.Tokenize(" "+strings.Repeat(o.Query+" ", 4), false)
	if err != nil {
		return nil, err
	}
	query = query[:min(o.QueryTok, len(query))]
	var cache *kvcache.Cache
	if o.Dir != "" {
		db, err := datadir.Open(datadir.Options{Dir: o.Dir, NoSync: true})
		if err != nil {
			return nil, err
		}
		defer db.Close()
		if cache, err = kvcache.Open(db, kvcache.Options{}); err != nil {
			return nil, err
		}
		defer cache.Close()
	}
	var rows []TTFTRow
	for _, n := range o.Prefixes {
		if n+len(query)+1 > e.NCtx() {
			return rows, fmt.Errorf("bench: prefix %d + query %d + 1 tokens exceed n_ctx %d (the model's or --ctx): use a shorter --prefix", n, len(query), e.NCtx())
		}
		prefix, err := Tokens(e, n, true)
		if err != nil {
			return rows, err
		}
		all := append(append([]int32{}, prefix...), query...)
		gen := func(seq, npast int, start time.Time) (time.Duration, error) {
			r, err := e.Generate(ctx, runtime.Request{Seq: seq, Tokens: all, NPast: npast, MaxTokens: 1, Start: start})
			return r.TTFT, err
		}
		row := TTFTRow{Prefix: n, Query: len(query)}
		if o.WarmUp {
			say("prefix %d: warm-up prefill", n)
			if err := e.ClearSeq(0); err != nil {
				return rows, err
			}
			if _, err := gen(0, 0, time.Time{}); err != nil {
				return rows, err
			}
		}
		var cold []float64
		for i := 0; i < o.ColdReps; i++ {
			say("prefix %d: cold prefill %d/%d", n, i+1, o.ColdReps)
			if err := e.ClearSeq(0); err != nil {
				return rows, err
			}
			d, err := gen(0, 0, time.Time{})
			if err != nil {
				return rows, err
			}
			cold = append(cold, ms(d))
		}
		row.ColdEachMs = append([]float64(nil), cold...)
		row.ColdMs = stats.Median(cold)
		// the pack: the cold sequence cut back to the prefix
		// (llama_memory_seq_rm), as the floor below is: one prefill per
		// length (16,000 tokens of the 1B shape take over 20 minutes on 2
		// cores)
		if err := e.TruncateSeq(0, n); err != nil {
			return rows, err
		}
		state, err := e.SaveSeq(0)
		if err != nil {
			return rows, err
		}
		blob, err := kvcache.Encode(kvcache.Header{KV: e.KVConfig(), Tokens: prefix, Lossy: o.Lossy}, state)
		if err != nil {
			return rows, err
		}
		row.StateBytes, row.BlobBytes, row.DiskFrom = int64(len(state)), int64(len(blob)), "blob"
		if cache != nil {
			// the pack as stored (Put may store raw a state Encode compresses)
			info, err := cache.Put(ctx, kvcache.Header{KV: e.KVConfig(), Tokens: prefix, Lossy: o.Lossy}, state)
			if err != nil {
				return rows, err
			}
			row.BlobBytes, row.DiskFrom = info.BlobBytes, "badger"
		}
		row.Compression = float64(len(state)) / float64(row.BlobBytes)
		var warm, warmDisk, floor, restore []float64
		for i := 0; i < o.Reps; i++ {
			say("prefix %d: warm/floor %d/%d", n, i+1, o.Reps)
			e.ClearSeq(0)
			start := time.Now()
			if _, err := e.RestoreSeq(0, state); err != nil {
				return rows, err
			}
			restore = append(restore, ms(time.Since(start)))
			d, err := gen(0, n, start)
			if err != nil {
				return rows, err
			}
			warm = append(warm, ms(d))

			// the floor: the same sequence cut back to the prefix
			// (llama_memory_seq_rm), so one sequence's cells are ever used
			if err := e.TruncateSeq(0, n); err != nil {
				return rows, err
			}
			d, err = gen(0, n, time.Time{})
			if err != nil {
				return rows, err
			}
			floor = append(floor, ms(d))

			e.ClearSeq(0)
			if cache != nil {
				cache.DropRAM()
			}
			start = time.Now()
			if cache != nil {
				r, err := cache.Restore(ctx, e, 0, all, kvcache.RestoreOptions{})
				if err != nil {
					return rows, err
				}
				if r.Tokens != n || r.FromRAM || r.Refused != nil {
					return rows, fmt.Errorf("bench: restore from Badger gave %d of %d tokens (from RAM %v, refused %v)", r.Tokens, n, r.FromRAM, r.Refused)
				}
			} else {
				_, st, err := kvcache.Decode(blob)
				if err != nil {
					return rows, err
				}
				if _, err := e.RestoreSeq(0, st); err != nil {
					return rows, err
				}
			}
			d, err = gen(0, n, start)
			if err != nil {
				return rows, err
			}
			warmDisk = append(warmDisk, ms(d))
		}
		row.WarmMs, row.WarmDiskMs, row.FloorMs, row.RestoreMs = stats.Median(warm), stats.Median(warmDisk), stats.Median(floor), stats.Median(restore)
		row.WarmDiskEachMs, row.FloorEachMs = warmDisk, floor
		row.ColdOverW = row.ColdMs / row.WarmMs
		row.WarmOverF = row.WarmMs / row.FloorMs
		rows = append(rows, row)
		e.ClearSeq(0)
	}
	return rows, nil
}

// TTFTTable renders rows as a Markdown table.
func TTFTTable(rows []TTFTRow) string {
	var b strings.Builder
	from := "blob"
	if len(rows) > 0 {
		from = rows[0].DiskFrom
	}
	fmt.Fprintf(&b, "| prefix | query | cold TTFT ms | warm TTFT ms | warm (from %s) ms | floor ms | restore ms | cold/warm | warm/floor | %s/floor | state | blob | ratio |\n", from, from)
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %d | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1fx | %.3f | %.3f | %.1f MiB | %.1f MiB | %.2fx |\n",
			r.Prefix, r.Query, r.ColdMs, r.WarmMs, r.WarmDiskMs, r.FloorMs, r.RestoreMs, r.ColdOverW, r.WarmOverF,
			r.WarmDiskMs/r.FloorMs, float64(r.StateBytes)/(1<<20), float64(r.BlobBytes)/(1<<20), r.Compression)
	}
	return b.String()
}
