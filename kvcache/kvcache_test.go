package kvcache

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"

	bg "github.com/dgraph-io/badger/v4"

	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/internal/testenv"
	"github.com/memosrt/memosrt/runtime"
)

func TestBlobRoundTrip(t *testing.T) {
	state := make([]byte, 10001)
	for i := range state {
		state[i] = byte(i * 7 % 251)
	}
	h := Header{KV: runtime.KVConfig{ModelFingerprint: "ab", NLayer: 5, TypeK: "f16", TypeV: "f16", NStream: 1}, Tokens: []int32{1, 2, 3}, Label: "c"}
	blob, err := Encode(h, state)
	if err != nil {
		t.Fatal(err)
	}
	gh, got, err := Decode(blob)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, state) || gh.NTokens != 3 || gh.RawBytes != 10001 || gh.Label != "c" || gh.NCtxNeeded != 3 {
		t.Fatalf("round trip: header %+v, equal %v", gh, bytes.Equal(got, state))
	}
	// every truncation and every single-byte flip is detected
	for _, n := range []int{0, 3, 10, len(blob) / 2, len(blob) - 9, len(blob) - 1} {
		if _, _, err := Decode(blob[:n]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d: %v", n, err)
		}
	}
	for i := 0; i < len(blob); i += 97 {
		bad := bytes.Clone(blob)
		bad[i] ^= 0x10
		if _, _, err := Decode(bad); !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrVersion) {
			t.Fatalf("flip at %d: %v", i, err)
		}
	}
	bad := bytes.Clone(blob)
	bad[4] = 9
	if _, _, err := Decode(bad); !errors.Is(err, ErrVersion) {
		t.Fatalf("version: %v", err)
	}
}

func TestShuffle(t *testing.T) {
	for n := 0; n < 9; n++ {
		b := []byte("abcdefghi")[:n]
		if got := unshuffle2(shuffle2(b)); !bytes.Equal(got, b) {
			t.Fatalf("n=%d: %q", n, got)
		}
	}
	if got := string(shuffle2([]byte("aAbBcC"))); got != "abcABC" {
		t.Fatalf("shuffle2 = %q", got)
	}
}

// fixture: an engine, a cache, and a prompt whose first part is a stored pack.
type fixture struct {
	eng    *runtime.Engine
	cache  *Cache
	db     *datadir.DB
	pack   []int32
	prompt []int32
	cold   string
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{eng: testenv.Engine(t, runtime.Options{})}
	f.db = testenv.DB(t, t.TempDir())
	var err error
	if f.cache, err = Open(f.db, Options{}); err != nil {
		t.Fatal(err)
	}
	f.pack, _ = f.eng.Tokenize("Lily had a small dog named Max. Max liked to run in the garden.", true)
	rest, _ := f.eng.Tokenize(" One day Lily and Max", false)
	f.prompt = append(append([]int32{}, f.pack...), rest...)
	f.cold = f.generate(t, 0)
	if _, err := f.cache.Warm(context.Background(), f.eng, 0, f.pack, WarmOptions{Label: "cube"}); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) generate(t *testing.T, npast int) string {
	t.Helper()
	if npast == 0 {
		f.eng.ClearSeq(0)
	}
	r, err := f.eng.Generate(context.Background(), runtime.Request{Seq: 0, Tokens: f.prompt, NPast: npast, MaxTokens: 40})
	if err != nil {
		t.Fatal(err)
	}
	return r.Text
}

func TestRestoreEqualsColdPrefill(t *testing.T) {
	f := newFixture(t)
	for _, fromDisk := range []bool{false, true} {
		if fromDisk {
			f.cache.DropRAM()
		}
		f.eng.ClearSeq(0)
		r, err := f.cache.Restore(context.Background(), f.eng, 0, f.prompt, RestoreOptions{})
		if err != nil || r.Refused != nil {
			t.Fatal(err, r.Refused)
		}
		if r.Tokens != len(f.pack) || r.FromRAM == fromDisk {
			t.Fatalf("restored %d tokens (want %d), fromRAM %v", r.Tokens, len(f.pack), r.FromRAM)
		}
		if got := f.generate(t, r.Tokens); got != f.cold {
			t.Fatalf("fromDisk=%v: restored output %q, cold %q", fromDisk, got, f.cold)
		}
	}
}

func TestLookupLongestPrefix(t *testing.T) {
	f := newFixture(t)
	cfg := ConfigKey(f.eng.KVConfig(), "")
	if m := f.cache.Lookup(cfg, f.prompt); m.Tokens != len(f.pack) {
		t.Fatalf("match %d, want %d", m.Tokens, len(f.pack))
	}
	// a request diverging inside the pack matches up to the divergence
	other := append(append([]int32{}, f.pack[:7]...), 99, 98, 97)
	if m := f.cache.Lookup(cfg, other); m.Tokens != 7 {
		t.Fatalf("match %d, want 7", m.Tokens)
	}
	// another adapter set or KV config never matches
	if m := f.cache.Lookup(ConfigKey(f.eng.KVConfig(), "lora-a:1"), f.prompt); m.ID != "" {
		t.Fatalf("matched across adapter sets: %+v", m)
	}
	kv := f.eng.KVConfig()
	kv.TypeK = "q8_0"
	if m := f.cache.Lookup(ConfigKey(kv, ""), f.prompt); m.ID != "" {
		t.Fatal("matched across KV configs")
	}
	// long prompts: a 300-token pack is found through the block chain
	long, _ := f.eng.Tokenize(string(bytes.Repeat([]byte("The sun was warm and the sky was blue. "), 30)), true)
	long = long[:300]
	if _, err := f.cache.Warm(context.Background(), f.eng, 0, long, WarmOptions{Label: "long"}); err != nil {
		t.Fatal(err)
	}
	req := append(append([]int32{}, long...), 5, 6, 7)
	if m := f.cache.Lookup(cfg, req); m.Tokens != 300 {
		t.Fatalf("long match %d", m.Tokens)
	}
}

// corrupt rewrites the stored blob of the only pack with fn's result.
func corrupt(t *testing.T, f *fixture, fn func([]byte) []byte) {
	t.Helper()
	infos := f.cache.List("cube")
	if len(infos) != 1 {
		t.Fatalf("%d packs", len(infos))
	}
	blob, err := f.cache.Blob(infos[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	bad := fn(bytes.Clone(blob))
	err = f.db.Badger().Update(func(txn *bg.Txn) error {
		if err := txn.Delete(chunkKey(infos[0].ID, 0)); err != nil {
			return err
		}
		return txn.Set(chunkKey(infos[0].ID, 0), bad)
	})
	if err != nil {
		t.Fatal(err)
	}
	f.cache.DropRAM()
}

func TestDamagedPacksAreRefused(t *testing.T) {
	cases := []struct {
		name string
		fn   func(*testing.T, *fixture)
	}{
		{"truncated", func(t *testing.T, f *fixture) { corrupt(t, f, func(b []byte) []byte { return b[:len(b)-100] }) }},
		{"bit-flipped", func(t *testing.T, f *fixture) {
			corrupt(t, f, func(b []byte) []byte { b[len(b)/2] ^= 0x04; return b })
		}},
		{"other-kv-config", func(t *testing.T, f *fixture) {
			// a state computed with an f32 K cache, stored under a header claiming the live config
			other := testenv.Engine(t, runtime.Options{TypeK: "f32", NSeqMax: 1})
			if err := other.Prefill(context.Background(), 0, f.pack, 0); err != nil {
				t.Fatal(err)
			}
			st, err := other.SaveSeq(0)
			if err != nil {
				t.Fatal(err)
			}
			// Put never rewrites a stored pack (ids are content addresses):
			// delete the good one, then store the liar under its id
			for _, i := range f.cache.List("cube") {
				if err := f.cache.Delete(i.ID); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := f.cache.Put(context.Background(), Header{KV: f.eng.KVConfig(), Tokens: f.pack, Label: "cube"}, st); err != nil {
				t.Fatal(err)
			}
			f.cache.DropRAM()
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			// seq 1 holds another conversation that must stay untouched
			if err := f.eng.Prefill(context.Background(), 1, f.pack[:10], 0); err != nil {
				t.Fatal(err)
			}
			seq1, _ := f.eng.SaveSeq(1)
			tc.fn(t, f)
			f.eng.Prefill(context.Background(), 0, f.pack[:5], 0) // junk in the target seq
			r, err := f.cache.Restore(context.Background(), f.eng, 0, f.prompt, RestoreOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if r.Refused == nil || r.Tokens != 0 {
				t.Fatalf("not refused: %+v", r)
			}
			if n := f.eng.SeqLen(0); n != 0 {
				t.Fatalf("target seq holds %d positions after a refusal", n)
			}
			if got, _ := f.eng.SaveSeq(1); !bytes.Equal(got, seq1) {
				t.Fatal("another sequence changed")
			}
			if len(f.cache.List("")) != 0 {
				t.Fatal("refused pack was not dropped")
			}
			if got := f.generate(t, 0); got != f.cold {
				t.Fatalf("fallback output %q, cold %q", got, f.cold)
			}
		})
	}
}

func TestHeaderCheck(t *testing.T) {
	live := runtime.KVConfig{ModelFingerprint: "m", NLayer: 5, KRowBytes: 64, VRowBytes: 64, TypeK: "f16", TypeV: "f16", NStream: 1, NCtx: 256}
	h := Header{KV: live, NCtxNeeded: 100}
	if err := h.Check(live, ""); err != nil {
		t.Fatal(err)
	}
	muts := map[string]func(*runtime.KVConfig){
		"model":    func(k *runtime.KVConfig) { k.ModelFingerprint = "x" },
		"type_k":   func(k *runtime.KVConfig) { k.TypeK = "q8_0" },
		"v_layout": func(k *runtime.KVConfig) { k.VTrans = true },
		"n_ctx":    func(k *runtime.KVConfig) { k.NCtx = 64 },
	}
	for name, mut := range muts {
		l := live
		mut(&l)
		if err := h.Check(l, ""); !errors.Is(err, ErrMismatch) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := h.Check(live, "a:1"); !errors.Is(err, ErrMismatch) {
		t.Errorf("adapter: %v", err)
	}
}

func TestPersistAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	eng := testenv.Engine(t, runtime.Options{})
	pack, _ := eng.Tokenize("Tom likes blue kites.", true)
	db, err := datadir.Open(datadir.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := Open(db, Options{})
	info, err := c.Warm(context.Background(), eng, 0, pack, WarmOptions{Label: "tom"})
	if err != nil {
		t.Fatal(err)
	}
	blob1, _ := c.Blob(info.ID)
	c.Close()
	db.Close()
	db2 := testenv.DB(t, dir)
	c2, err := Open(db2, Options{})
	if err != nil {
		t.Fatal(err)
	}
	blob2, err := c2.Blob(info.ID)
	if err != nil || !bytes.Equal(blob1, blob2) {
		t.Fatalf("blob not byte-identical after reopen: %v", err)
	}
	if m := c2.Lookup(ConfigKey(eng.KVConfig(), ""), append(append([]int32{}, pack...), 7)); m.Tokens != len(pack) {
		t.Fatalf("lookup after reopen: %+v", m)
	}
}

func TestOrphanChunksRemoved(t *testing.T) {
	dir := t.TempDir()
	db, _ := datadir.Open(datadir.Options{Dir: dir})
	id := PackID("cfg", []int32{1, 2})
	db.Badger().Update(func(txn *bg.Txn) error { return txn.Set(chunkKey(id, 0), []byte("partial")) })
	if _, err := Open(db, Options{}); err != nil {
		t.Fatal(err)
	}
	err := db.Badger().View(func(txn *bg.Txn) error { _, err := txn.Get(chunkKey(id, 0)); return err })
	if !errors.Is(err, bg.ErrKeyNotFound) {
		t.Fatalf("orphan chunk still there: %v", err)
	}
	db.Close()
}

func TestRAMBudget(t *testing.T) {
	eng := testenv.Engine(t, runtime.Options{})
	db := testenv.DB(t, t.TempDir())
	a, _ := eng.Tokenize("Anna has a green hat.", true)
	b, _ := eng.Tokenize("Bob rides a yellow bike to school.", true)
	c0, _ := Open(db, Options{})
	ia, _ := c0.Warm(context.Background(), eng, 0, a, WarmOptions{})
	ib, _ := c0.Warm(context.Background(), eng, 0, b, WarmOptions{})
	// budget for the larger state only: the older one is evicted
	c, err := Open(db, Options{RAMBytes: max(ia.RawBytes, ib.RawBytes)})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{ia.ID, ib.ID} {
		if _, _, fromRAM, err := c.State(id); err != nil || fromRAM {
			t.Fatalf("first read of %s: fromRAM %v, %v", id[:8], fromRAM, err)
		}
	}
	ram, disk, n := c.Stats()
	if ram > max(ia.RawBytes, ib.RawBytes) || n != 2 || disk != ia.BlobBytes+ib.BlobBytes {
		t.Fatalf("stats ram %d disk %d packs %d", ram, disk, n)
	}
	if _, _, fromRAM, _ := c.State(ib.ID); !fromRAM {
		t.Fatal("most recent state not in RAM")
	}
	if _, _, fromRAM, _ := c.State(ia.ID); fromRAM {
		t.Fatal("evicted state still in RAM")
	}
}

// A prompt exactly equal to the pack's tokens restores all but the last
// token, decodes that one, and equals cold prefill.
func TestPromptEqualToPack(t *testing.T) {
	f := newFixture(t)
	f.prompt = f.pack
	cold := f.generate(t, 0)
	r, err := f.cache.Restore(context.Background(), f.eng, 0, f.pack, RestoreOptions{})
	if err != nil || r.Tokens != len(f.pack)-1 || r.PackTotal != len(f.pack) {
		t.Fatalf("restore %+v, %v", r, err)
	}
	if got := f.generate(t, r.Tokens); got != cold {
		t.Fatalf("exact-prefix output %q, cold %q", got, cold)
	}
}

// A pack is only found in its own scope (cube).
func TestScopes(t *testing.T) {
	eng := testenv.Engine(t, runtime.Options{})
	c, err := Open(testenv.DB(t, t.TempDir()), Options{})
	if err != nil {
		t.Fatal(err)
	}
	pack, _ := eng.Tokenize("Alice's PIN is 4821.", true)
	info, err := c.Warm(context.Background(), eng, 0, pack, WarmOptions{Label: "alice", Scope: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	req := append(append([]int32{}, pack...), 5)
	for _, scope := range []string{"", "mallory", "alic"} {
		if r, err := c.Restore(context.Background(), eng, 0, req, RestoreOptions{Scope: scope}); err != nil || r.Tokens != 0 {
			t.Fatalf("scope %q restored %d tokens of alice's pack (%v)", scope, r.Tokens, err)
		}
	}
	r, err := c.Restore(context.Background(), eng, 0, req, RestoreOptions{Scope: "alice"})
	if err != nil || r.PackID != info.ID || r.Tokens != len(pack) {
		t.Fatalf("own scope: %+v, %v", r, err)
	}
}

// Put of a pack that is stored already keeps the stored one: it never
// deletes a committed pack to write it again (a crash in between would
// lose it), and returns its Info.
func TestPutExistingKeepsIt(t *testing.T) {
	f := newFixture(t)
	infos := f.cache.List("cube")
	if len(infos) != 1 {
		t.Fatalf("%d packs", len(infos))
	}
	blob, _ := f.cache.Blob(infos[0].ID)
	h, state, err := Decode(blob)
	if err != nil {
		t.Fatal(err)
	}
	got, err := f.cache.Put(context.Background(), Header{KV: h.KV, Tokens: h.Tokens, Label: "cube"}, state)
	if err != nil || got.ID != infos[0].ID || !got.Created.Equal(infos[0].Created) {
		t.Fatalf("Put again: %+v %v, stored %+v", got, err, infos[0])
	}
	if again, _ := f.cache.Blob(infos[0].ID); !bytes.Equal(again, blob) {
		t.Fatal("the stored blob was rewritten")
	}
}

// A state zstd cannot shrink by 10% is stored raw, round-trips byte for
// byte, and every truncation and flip is still caught.
func TestBlobRawCodec(t *testing.T) {
	state := make([]byte, 20000)
	x := uint32(1)
	for i := range state {
		x = x*1664525 + 1013904223 // LCG: incompressible bytes
		state[i] = byte(x >> 24)
	}
	h := Header{KV: runtime.KVConfig{ModelFingerprint: "ab", NLayer: 5, TypeK: "f16", TypeV: "f16", NStream: 1}, Tokens: []int32{1, 2, 3}}
	blob, err := Encode(h, state)
	if err != nil {
		t.Fatal(err)
	}
	gh, got, err := Decode(blob)
	if err != nil || gh.Codec != CodecRaw || !bytes.Equal(got, state) {
		t.Fatalf("codec %q, equal %v, %v", gh.Codec, bytes.Equal(got, state), err)
	}
	if len(blob) > len(state)+1024 {
		t.Fatalf("raw blob of %d bytes for a %d-byte state", len(blob), len(state))
	}
	for _, n := range []int{0, 10, len(blob) / 2, len(blob) - 1} {
		if _, _, err := Decode(blob[:n]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d: %v", n, err)
		}
	}
	for i := 0; i < len(blob); i += 101 {
		bad := bytes.Clone(blob)
		bad[i] ^= 0x04
		if _, _, err := Decode(bad); !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrVersion) {
			t.Fatalf("flip at %d: %v", i, err)
		}
	}
	// a compressible state keeps zstd
	if gh, _, _ := Decode(mustEncode(t, h, make([]byte, 20000))); gh.Codec != CodecZstdShuffle2 {
		t.Fatalf("zeros stored as %q", gh.Codec)
	}
}

func mustEncode(t *testing.T, h Header, state []byte) []byte {
	t.Helper()
	b, err := Encode(h, state)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The word-at-a-time byte shuffle equals the definition (even bytes, then
// odd bytes) at every length, and unshuffle2 inverts it.
func TestShuffle2(t *testing.T) {
	for n := 0; n < 80; n++ {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*37 + 11)
		}
		want := make([]byte, 0, n)
		for i := 0; i+1 < n; i += 2 {
			want = append(want, b[i])
		}
		for i := 1; i < n; i += 2 {
			want = append(want, b[i])
		}
		if n%2 == 1 {
			want = append(want, b[n-1])
		}
		got := shuffle2(b)
		if !bytes.Equal(got, want) {
			t.Fatalf("n=%d: shuffle2 %v, want %v", n, got, want)
		}
		if back := unshuffle2(got); !bytes.Equal(back, b) {
			t.Fatalf("n=%d: unshuffle2 %v, want %v", n, back, b)
		}
	}
}

// A state larger than one segment is stored in parallel zstd segments and
// reads back byte for byte; damage to its segment table or frames is
// caught.
func TestBlobSegments(t *testing.T) {
	state := make([]byte, 2*segBytes+12345)
	x := uint32(7)
	for i := 0; i+1 < len(state); i += 2 {
		x = x*1664525 + 1013904223
		state[i] = byte(x >> 24)          // random low bytes
		state[i+1] = 0x30 + byte(x>>8)%12 // f16-like high bytes: compressible
	}
	h := Header{KV: runtime.KVConfig{ModelFingerprint: "ab", NLayer: 5, TypeK: "f16", TypeV: "f16", NStream: 1}, Tokens: []int32{1, 2, 3}}
	blob, err := Encode(h, state)
	if err != nil {
		t.Fatal(err)
	}
	gh, got, err := Decode(blob)
	if err != nil || gh.Codec != CodecZstdShuffle2Seg || !bytes.Equal(got, state) {
		t.Fatalf("codec %q, equal %v, %v", gh.Codec, bytes.Equal(got, state), err)
	}
	if len(blob) > len(state)*9/10 {
		t.Fatalf("blob %d bytes for a %d-byte state", len(blob), len(state))
	}
	_, payload, err := DecodeHeader(blob)
	if err != nil {
		t.Fatal(err)
	}
	off := len(blob) - 8 - len(payload) // payload's offset in blob
	if n := binary.LittleEndian.Uint32(payload); n != 3 {
		t.Fatalf("%d segments, want 3", n)
	}
	// decodeSegments itself refuses bad tables and frames (the blob's
	// checksum would catch these first)
	for name, bad := range map[string]func([]byte){
		"count":  func(p []byte) { binary.LittleEndian.PutUint32(p, 9) },
		"size":   func(p []byte) { binary.LittleEndian.PutUint32(p[4:], 1) },
		"length": func(p []byte) { binary.LittleEndian.PutUint64(p[8:], 1<<40) },
		"short":  func(p []byte) { binary.LittleEndian.PutUint64(p[8:], binary.LittleEndian.Uint64(p[8:])-1) },
		"frame":  func(p []byte) { p[len(p)-100] ^= 0xff },
	} {
		p := bytes.Clone(blob[off : off+len(payload)])
		bad(p)
		_, d := codecs()
		if _, err := decodeSegments(d, p, len(state)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
	for _, n := range []int{len(blob) / 3, len(blob) - 1} {
		if _, _, err := Decode(blob[:n]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d: %v", n, err)
		}
	}
}

// A pack larger than the data directory's value-log file (small on a small
// filesystem: see datadir.Options.ValueLogFileSize) is stored in chunks
// that fit one, and reads back byte for byte after a reopen. Before, its
// chunks were 32 MiB whatever the file size, and Badger refused a chunk
// larger than a file ("Value with size ... exceeded").
func TestPackLargerThanValueLogFile(t *testing.T) {
	dir := t.TempDir()
	open := func() *datadir.DB {
		db, err := datadir.Open(datadir.Options{Dir: dir, NoSync: true, ValueLogFileSize: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		return db
	}
	db := open()
	c, err := Open(db, Options{})
	if err != nil {
		t.Fatal(err)
	}
	state := make([]byte, 3<<20+12345)
	r := rand.New(rand.NewPCG(1, 2)) // incompressible: the blob is as large
	for i := range state {
		state[i] = byte(r.Uint32())
	}
	info, err := c.Put(context.Background(), Header{Tokens: []int32{1, 2, 3}, Label: "big"}, state)
	if err != nil {
		t.Fatal(err)
	}
	if info.BlobBytes <= 3<<20 {
		t.Fatalf("blob of %d bytes, want more than 3 MiB", info.BlobBytes)
	}
	blob1, err := c.Blob(info.ID)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	db.Close()
	db = open()
	defer db.Close()
	c, err = Open(db, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	blob2, err := c.Blob(info.ID)
	if err != nil || !bytes.Equal(blob1, blob2) {
		t.Fatalf("blob after reopen: equal %v, %v", bytes.Equal(blob1, blob2), err)
	}
	_, got, err := Decode(blob2)
	if err != nil || !bytes.Equal(got, state) {
		t.Fatalf("state after reopen: equal %v, %v", bytes.Equal(got, state), err)
	}
}
