package kvcache

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/memosrt/memosrt/internal/half"
	"github.com/memosrt/memosrt/internal/testenv"
)

// benchState returns the state BenchmarkStateFromBadger restores: the file
// named by MEMOSRT_BENCH_STATE (a llama_state_seq_get_data dump), else
// MEMOSRT_BENCH_STATE_MIB MiB (default 128, the 1B shape's 4,096-token
// state size; 500 is its 16,000-token one) of f16 values drawn from
// N(0, 1), with the low MEMOSRT_BENCH_STATE_ZERO mantissa bits cleared (0
// by default: stored raw; 6 compresses about 1.3x, as the 1B shape's
// 16,000-token state does).
func benchState(b testing.TB) []byte {
	if p := os.Getenv("MEMOSRT_BENCH_STATE"); p != "" {
		st, err := os.ReadFile(p)
		if err != nil {
			b.Fatal(err)
		}
		return st
	}
	mib, zero := 128, 0
	if v, err := strconv.Atoi(os.Getenv("MEMOSRT_BENCH_STATE_MIB")); err == nil && v > 0 {
		mib = v
	}
	if v, err := strconv.Atoi(os.Getenv("MEMOSRT_BENCH_STATE_ZERO")); err == nil && v >= 0 && v <= 10 {
		zero = v
	}
	mask := ^uint16(1<<zero - 1)
	r := rand.New(rand.NewPCG(1, 2))
	st := make([]byte, mib<<20)
	for i := 0; i+1 < len(st); i += 2 {
		h := half.Bits(float32(r.NormFloat64())) & mask
		st[i], st[i+1] = byte(h), byte(h>>8)
	}
	return st
}

// BenchmarkStateFromBadger: a pack read back from Badger with the RAM
// cache dropped (Cache.State: read, check, decompress), in MB/s of state.
// Put chooses the codec by measured cost (costRule); with
// MEMOSRT_BENCH_CODEC=size it keeps the fixed rule of Encode instead.
// Set MEMOSRT_BENCH_STATE to a real state (the generated 1B shape's
// random-weight KV compresses about 1.05x at 1,024 tokens, 1.2x at 4,096).
func BenchmarkStateFromBadger(b *testing.B) {
	st := benchState(b)
	c := newBenchCache(b)
	if os.Getenv("MEMOSRT_BENCH_CODEC") == "size" {
		c.keepRaw = sizeRule // the fixed 10% rule (before the choice by measured cost)
	}
	info, err := c.Put(context.Background(), Header{Tokens: []int32{1, 2, 3}}, st)
	if err != nil {
		b.Fatal(err)
	}
	blob, err := c.Blob(info.ID)
	if err != nil {
		b.Fatal(err)
	}
	h, _, err := DecodeHeader(blob)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("state %d bytes, blob %d bytes (%.3fx), codec %s", info.RawBytes, info.BlobBytes, info.Ratio(), h.Codec)
	b.SetBytes(int64(len(st)))
	cpu0 := processCPU()
	b.ResetTimer()
	for range b.N {
		c.DropRAM()
		if _, _, _, err := c.State(info.ID); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportCPU(b, cpu0)
}

// BenchmarkRestoreStateFromBadger is BenchmarkStateFromBadger through
// the read Restore makes (restoreState): the state decoded into the
// buffers the cache keeps for reuse, given back after each read, and not
// cached in RAM. Its first read, like every read of
// BenchmarkStateFromBadger, decodes into a fresh buffer.
func BenchmarkRestoreStateFromBadger(b *testing.B) {
	st := benchState(b)
	c := newBenchCache(b)
	info, err := c.Put(context.Background(), Header{Tokens: []int32{1, 2, 3}}, st)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(st)))
	cpu0 := processCPU()
	b.ResetTimer()
	for range b.N {
		c.DropRAM()
		_, got, _, release, err := c.restoreState(info.ID)
		if err != nil || len(got) != len(st) {
			b.Fatal(len(got), err)
		}
		release()
	}
	b.StopTimer()
	reportCPU(b, cpu0)
}

// reportCPU reports the process's CPU time per op since cpu0 (cpu-ms/op:
// every thread's, so the decode's goroutines and page faults count; on a
// shared machine it moves less with the load than the wall time does).
func reportCPU(b *testing.B, cpu0 int64) {
	if ns := processCPU() - cpu0; ns > 0 && cpu0 > 0 {
		b.ReportMetric(float64(ns)/1e6/float64(b.N), "cpu-ms/op")
	}
}

func newBenchCache(b *testing.B) *Cache {
	db := testenv.DB(b, b.TempDir())
	c, err := Open(db, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// seqState1B returns a llama_state_seq_get_data state of the 1B shape
// (16 layers, 8 KV heads of 64, f16 K and V, V not transposed: flash
// attention on, as llama.cpp's auto sets it on the CPU) holding n cells,
// its values drawn from N(0, 1): 32 KiB a token, 128 MiB at 4,096.
func seqState1B(n int) []byte {
	const layers, row = 16, 512 * 2
	r := rand.New(rand.NewPCG(3, 4))
	st := binary.LittleEndian.AppendUint32(nil, 1) // n_stream
	st = binary.LittleEndian.AppendUint32(st, uint32(n))
	for i := range n {
		st = binary.LittleEndian.AppendUint32(st, uint32(i)) // pos
		st = binary.LittleEndian.AppendUint32(st, 1)         // n_seq_id
		st = binary.LittleEndian.AppendUint32(st, 0)         // seq id
	}
	st = binary.LittleEndian.AppendUint32(st, 0) // v_trans
	st = binary.LittleEndian.AppendUint32(st, layers)
	for range 2 * layers { // K blocks, then V blocks
		st = binary.LittleEndian.AppendUint32(st, ggmlF16)
		st = binary.LittleEndian.AppendUint64(st, row)
		for range n * row / 2 {
			st = binary.LittleEndian.AppendUint16(st, half.Bits(float32(r.NormFloat64())))
		}
	}
	return st
}

// BenchmarkRestoreLossyFromBadger is BenchmarkRestoreStateFromBadger for a
// q8 pack (Put chooses its payload's codec by measured cost, as the
// store does): a state of the 1B shape of MEMOSRT_BENCH_TOKENS tokens
// (default 4,096: 128 MiB), or the state in the file MEMOSRT_BENCH_STATE.
func BenchmarkRestoreLossyFromBadger(b *testing.B) {
	var st []byte
	if os.Getenv("MEMOSRT_BENCH_STATE") != "" {
		st = benchState(b)
	} else {
		n := 4096
		if v, err := strconv.Atoi(os.Getenv("MEMOSRT_BENCH_TOKENS")); err == nil && v > 0 {
			n = v
		}
		st = seqState1B(n)
	}
	c := newBenchCache(b)
	info, err := c.Put(context.Background(), Header{Tokens: []int32{1, 2, 3}, Lossy: &LossyParams{Bits: 8, KeyGroup: 128, ValGroup: 64}}, st)
	if err != nil {
		b.Fatal(err)
	}
	blob, err := c.Blob(info.ID)
	if err != nil {
		b.Fatal(err)
	}
	h, _, err := DecodeHeader(blob)
	if err != nil {
		b.Fatal(err)
	}
	q, _, err := Quantize(st, *h.Lossy)
	if err != nil {
		b.Fatal(err)
	}
	e, _ := codecs()
	b.Logf("state %d bytes, blob %d bytes (%.3fx), codec %s, %s; the quantized stream %d bytes, under %s %d bytes (%.3fx)", info.RawBytes, info.BlobBytes,
		info.Ratio(), h.Codec, info.KVCodec, len(q), CodecZstdShuffle2Seg, len(encodeSegments(e, q, segBytes)), float64(len(q))/float64(len(encodeSegments(e, q, segBytes))))
	b.SetBytes(int64(len(st)))
	cpu0 := processCPU()
	b.ResetTimer()
	for range b.N {
		c.DropRAM()
		_, got, _, release, err := c.restoreState(info.ID)
		if err != nil || len(got) != len(st) {
			b.Fatal(len(got), err)
		}
		release()
	}
	b.StopTimer()
	reportCPU(b, cpu0)
}
