package kvcache

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/memosrt/memosrt/internal/testenv"
)

// A composed pack is a version 3 blob, exact or lossy: it restores as a
// composed pack (Restored.Composed; ExactOnly takes its exact part only),
// and a build that reads versions 1 and 2 only refuses it with ErrVersion
// instead of restoring it as an exact state.
func TestComposedPackFormat(t *testing.T) {
	f := newFixture(t) // f.cache holds the exact pack of f.pack
	ctx := context.Background()
	exact := f.cache.List("cube")
	if len(exact) != 1 {
		t.Fatalf("exact packs: %+v", exact)
	}
	_, exactState, _, err := f.cache.State(exact[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	comp := &Composition{First: 5, Tokens: len(f.pack) - 5, Recomputed: 2, Ratio: 0.15}
	for _, lossy := range []*LossyParams{nil, {Bits: 8, KeyGroup: 128, ValGroup: 64}} {
		name := "exact"
		if lossy != nil {
			name = "q8"
		}
		t.Run(name, func(t *testing.T) {
			c, err := Open(testenv.DB(t, t.TempDir()), Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			info, err := c.Put(ctx, Header{KV: f.eng.KVConfig(), Tokens: f.pack, Label: "cube", Lossy: lossy, Composed: comp}, exactState)
			if err != nil {
				t.Fatal(err)
			}
			if info.KVCodec != name || !reflect.DeepEqual(info.Composed, comp) {
				t.Fatalf("info %+v", info)
			}
			blob, err := c.Blob(info.ID)
			if err != nil {
				t.Fatal(err)
			}
			if v := binary.LittleEndian.Uint16(blob[4:]); v != FormatVersionComposed {
				t.Fatalf("composed pack written as version %d", v)
			}
			h, state, err := Decode(blob)
			if err != nil || !reflect.DeepEqual(h.Composed, comp) || !lossyEq(h.Lossy, lossy) {
				t.Fatalf("decode: %v, header %+v", err, h)
			}
			if lossy == nil && !bytes.Equal(state, exactState) {
				t.Fatal("exact composed pack: decoded state differs from the stored one")
			}
			// a build that reads versions 1 and 2 refuses it, never restores it as exact
			err = checkVersion(binary.LittleEndian.Uint16(blob[4:]), FormatVersionExact, FormatVersionLossy)
			if !errors.Is(err, ErrVersion) || !strings.Contains(err.Error(), "3 (this build reads [1 2])") {
				t.Fatalf("v2 reader on a v3 blob: %v", err)
			}
			// version 3 without a composition, or with a negative one, is refused
			_, payload, err := DecodeHeader(blob)
			if err != nil {
				t.Fatal(err)
			}
			for _, bad := range []*Composition{nil, {First: -1, Tokens: 3}, {First: 2, Tokens: -3}} {
				lie := h
				lie.Composed = bad
				hj, _ := json.Marshal(lie)
				if _, _, err := Decode(frameBlob(hj, payload, FormatVersionComposed)); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("composition %+v: %v", bad, err)
				}
			}
			// a composed header in the version the builds before version 3
			// wrote (1 exact, 2 lossy) still reads as composed
			hj, _ := json.Marshal(h)
			old := uint16(FormatVersionExact)
			if lossy != nil {
				old = FormatVersionLossy
			}
			if h2, st2, err := Decode(frameBlob(hj, payload, old)); err != nil || !reflect.DeepEqual(h2.Composed, comp) || !bytes.Equal(st2, state) {
				t.Fatalf("version %d composed blob: %v, %+v", old, err, h2.Composed)
			}
			for _, fromDisk := range []bool{false, true} {
				if fromDisk {
					c.DropRAM()
				}
				f.eng.ClearSeq(0)
				r, err := c.Restore(ctx, f.eng, 0, f.prompt, RestoreOptions{})
				if err != nil || r.Refused != nil || r.Tokens != len(f.pack) || r.FromRAM == fromDisk || !reflect.DeepEqual(r.Composed, comp) {
					t.Fatalf("restore (fromDisk %v): %+v, %v", fromDisk, r, err)
				}
				restored, err := f.eng.SaveSeq(0)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(restored, state) {
					t.Fatalf("fromDisk %v: restored state differs from the decoded blob", fromDisk)
				}
				f.eng.ClearSeq(0)
				r, err = c.Restore(ctx, f.eng, 0, f.prompt, RestoreOptions{ExactOnly: true})
				if err != nil || r.Refused != nil || r.Tokens != comp.First || r.Composed != nil || f.eng.SeqLen(0) != comp.First {
					t.Fatalf("exact-only restore (fromDisk %v): %+v, %v", fromDisk, r, err)
				}
			}
		})
	}
}

// A blob of a format version newer than this build reads is refused with
// a clear ErrVersion before llama.cpp sees it; the pack is dropped and the
// turn takes exact prefill (the cold output).
func TestNewerBlobVersionRefused(t *testing.T) {
	f := newFixture(t)
	corrupt(t, f, func(b []byte) []byte {
		binary.LittleEndian.PutUint16(b[4:], FormatVersion+1)
		binary.LittleEndian.PutUint64(b[len(b)-8:], xxhash.Sum64(b[:len(b)-8]))
		return b
	})
	f.eng.ClearSeq(0)
	r, err := f.cache.Restore(context.Background(), f.eng, 0, f.prompt, RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(r.Refused, ErrVersion) || !strings.Contains(r.Refused.Error(), "4 (this build reads [1 2 3])") || r.Tokens != 0 {
		t.Fatalf("restored %+v, refused %v", r, r.Refused)
	}
	if n := f.eng.SeqLen(0); n != 0 {
		t.Fatalf("target seq holds %d positions after a refusal", n)
	}
	if got := f.generate(t, 0); got != f.cold {
		t.Fatalf("fallback output %q, cold %q", got, f.cold)
	}
}
