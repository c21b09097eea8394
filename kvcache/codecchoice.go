package kvcache

import (
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
)

// costMin: Put chooses the codec of states of at least this many bytes
// by measured cost (costRule), and reads of packs this large are timed
// (readRate).
const costMin = 4 << 20

// rawRule decides, for a state and the compressed payload encode made
// of it under codec, whether the blob stores the state raw instead.
type rawRule func(state, payload []byte, codec string) bool

// sizeRule is the rule of Encode: raw when the payload is more than
// rawBelowSaving of the state, whatever the machine.
func sizeRule(state, payload []byte, _ string) bool {
	return float64(len(payload)) > rawBelowSaving*float64(len(state))
}

// readRate is the measured cost of reading a stored blob byte back from
// Badger, in ns per byte on one core: an exponentially weighted mean over
// the reads of packs of at least costMin bytes, each read's cost the
// median over its 1 MiB blocks (readBlock) of the time the blob checksum
// takes over the block, which is where the bytes Badger lends are first
// read from the page cache or the disk. The median keeps a read on a
// loaded machine, where the checksum goroutine is descheduled now and
// then, from counting those pauses as a slow disk. Safe for concurrent
// use.
type readRate struct{ bits atomic.Uint64 } // math.Float64bits; 0: no read yet

// add folds one read's ns per byte into the mean (weight 1/4).
func (r *readRate) add(ns float64) {
	if !(ns > 0) || math.IsInf(ns, 0) {
		return
	}
	for {
		old := r.bits.Load()
		v := ns
		if old != 0 {
			v = 0.75*math.Float64frombits(old) + 0.25*ns
		}
		if r.bits.CompareAndSwap(old, math.Float64bits(v)) {
			return
		}
	}
}

// get returns the mean, 0 before any read.
func (r *readRate) get() float64 { return math.Float64frombits(r.bits.Load()) }

// median returns the median of v (not empty); v is sorted in place.
func median(v []float64) float64 {
	slices.Sort(v)
	if n := len(v); n%2 == 0 {
		return (v[n/2-1] + v[n/2]) / 2
	}
	return v[len(v)/2]
}

// codecCosts are the per-byte costs, ns on one core, that costRule
// weighs for one state.
type codecCosts struct {
	ReadNs   float64 // reading a stored byte back (max of readRate and memory)
	CopyNs   float64 // copying a raw payload byte into the state
	DecodeNs float64 // zstd and unshuffle, per state byte, of this state's first segment
}

// rawCheaper reports whether restoring a state of s bytes stored raw costs
// at most what restoring it from a b-byte compressed payload costs:
// reading s bytes and copying them against reading b bytes and decoding
// s (the checksum over the state, the allocation and the restore into
// llama.cpp are the same either way).
func (c codecCosts) rawCheaper(s, b int) bool {
	return c.ReadNs*float64(s)+c.CopyNs*float64(s) <= c.ReadNs*float64(b)+c.DecodeNs*float64(s)
}

// costRule is Put's rawRule: a state under costMin keeps sizeRule (its
// restore is a few ms either way, too short to time); a larger one is
// stored raw when rawCheaper says so, its costs measured now (measure)
// on its first segment, read cost from the reads this cache has made.
func (c *Cache) costRule(state, payload []byte, codec string) bool {
	if len(state) < costMin || len(payload) >= len(state) {
		return sizeRule(state, payload, codec)
	}
	costs, ok := measure(state, payload, codec, c.reads.get())
	if !ok {
		return sizeRule(state, payload, codec)
	}
	raw := costs.rawCheaper(len(state), len(payload))
	c.log.Debug("kvcache: pack codec by measured cost", "raw", raw, "state", len(state), "payload", len(payload),
		"read_ns", costs.ReadNs, "copy_ns", costs.CopyNs, "decode_ns", costs.DecodeNs)
	return raw
}

// measure times, on one core, the restore work of the first segment of
// state: copying it (raw), decoding its zstd frame of payload and
// unshuffling it (compressed), and reading the frame's bytes from memory
// (the floor of ReadNs; readNs, the cache's measured read cost, when
// higher). Each is the fastest of three runs into pooled buffers, so page
// faults of a fresh buffer do not count. ok is false when the payload
// cannot be decoded (it always can: encode made it).
func measure(state, payload []byte, codec string, readNs float64) (codecCosts, bool) {
	frame, seg := payload, state
	if codec == CodecZstdShuffle2Seg {
		n, size, err := segHead(payload, len(payload), len(state))
		if err != nil {
			return codecCosts{}, false
		}
		offs, err := segFrames(payload, n, len(payload))
		if err != nil {
			return codecCosts{}, false
		}
		frame, seg = payload[offs[0]:offs[1]], state[:size]
	}
	_, d := codecs()
	a, b := getScratch(len(seg)), getScratch(len(seg))
	defer putScratch(a)
	defer putScratch(b)
	dst, raw := (*a)[:len(seg)], (*b)[:0:len(seg)]
	best := func(f func() bool) (float64, bool) {
		t := math.Inf(1)
		for range 3 {
			start := time.Now()
			if !f() {
				return 0, false
			}
			t = min(t, float64(time.Since(start).Nanoseconds()))
		}
		return max(t, 1) / float64(len(seg)), true
	}
	var c codecCosts
	var ok bool
	if c.CopyNs, ok = best(func() bool { copy(dst, seg); return true }); !ok {
		return c, false
	}
	if c.DecodeNs, ok = best(func() bool {
		r, err := d.DecodeAll(frame, raw)
		if err != nil || len(r) != len(seg) {
			return false
		}
		unshuffle2Into(dst, r)
		return true
	}); !ok {
		return c, false
	}
	mem, _ := best(func() bool { xxhash.Sum64(frame); return true })
	c.ReadNs = max(readNs, mem*float64(len(seg))/float64(max(len(frame), 1)))
	return c, true
}
