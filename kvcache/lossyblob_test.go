package kvcache

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/memosrt/memosrt/internal/testenv"
)

// A lossy pack is a version 2 blob: its header names the codec and its
// parameters, it restores (dequantized to the live f16 KV) and the turn
// runs; a version 1 build's check refuses it with ErrVersion. An exact
// pack stays version 1.
func TestLossyPackFormat(t *testing.T) {
	f := newFixture(t) // f.cache holds the exact pack of f.pack
	ctx := context.Background()
	exact := f.cache.List("cube")
	if len(exact) != 1 || exact[0].KVCodec != "exact" {
		t.Fatalf("exact packs: %+v", exact)
	}
	eb, err := f.cache.Blob(exact[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if v := binary.LittleEndian.Uint16(eb[4:]); v != FormatVersionExact {
		t.Fatalf("exact pack written as version %d", v)
	}
	if err := checkVersion(binary.LittleEndian.Uint16(eb[4:]), FormatVersionExact); err != nil {
		t.Fatalf("a version 1 reader refuses an exact pack: %v", err)
	}

	for _, p := range []LossyParams{{Bits: 8, KeyGroup: 128, ValGroup: 64}, DefaultLossy} {
		lc, err := Open(testenv.DB(t, t.TempDir()), Options{})
		if err != nil {
			t.Fatal(err)
		}
		info, err := lc.Warm(ctx, f.eng, 0, f.pack, WarmOptions{Label: "cube", Lossy: &p})
		if err != nil {
			t.Fatal(err)
		}
		want := map[int]string{8: "q8", 4: "q4"}[p.Bits]
		if info.KVCodec != want || info.RawBytes != exact[0].RawBytes || info.BlobBytes >= exact[0].BlobBytes {
			t.Fatalf("%s pack %+v, exact %+v", want, info, exact[0])
		}
		blob, err := lc.Blob(info.ID)
		if err != nil {
			t.Fatal(err)
		}
		if v := binary.LittleEndian.Uint16(blob[4:]); v != FormatVersionLossy {
			t.Fatalf("lossy pack written as version %d", v)
		}
		h, state, err := Decode(blob)
		if err != nil || h.Lossy == nil || *h.Lossy != p || int64(len(state)) != h.StateBytes || h.StateBytes != exact[0].RawBytes {
			t.Fatalf("decode: %v, header %+v, %d state bytes", err, h, len(state))
		}
		// a version 1 build's check: a clear ErrVersion, never a misread state
		err = checkVersion(binary.LittleEndian.Uint16(blob[4:]), FormatVersionExact)
		if !errors.Is(err, ErrVersion) || !strings.Contains(err.Error(), "2 (this build reads [1])") {
			t.Fatalf("v1 reader on a v2 blob: %v", err)
		}
		// a header lying about the lossy state's length is refused
		_, payload, err := DecodeHeader(blob)
		if err != nil {
			t.Fatal(err)
		}
		for _, sb := range []int64{h.StateBytes + 2, 8*h.RawBytes + 1, 1 << 40} {
			lie := h
			lie.StateBytes = sb
			hj, _ := json.Marshal(lie)
			if _, _, err := Decode(frameBlob(hj, payload, FormatVersionLossy)); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("state bytes %d: %v", sb, err)
			}
		}
		// the version field says lossy or exact; lying about it is caught
		for _, v := range []uint16{FormatVersionExact, 3} {
			bad := bytes.Clone(blob)
			binary.LittleEndian.PutUint16(bad[4:], v)
			if _, _, err := Decode(bad); !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrVersion) {
				t.Fatalf("version %d: %v", v, err)
			}
		}
		for _, fromDisk := range []bool{false, true} {
			if fromDisk {
				lc.DropRAM()
			}
			f.eng.ClearSeq(0)
			r, err := lc.Restore(ctx, f.eng, 0, f.prompt, RestoreOptions{})
			if err != nil || r.Refused != nil || r.Tokens != len(f.pack) || r.FromRAM == fromDisk {
				t.Fatalf("%s restore (fromDisk %v): %+v, %v", want, fromDisk, r, err)
			}
			restored, err := f.eng.SaveSeq(0)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(restored, state) {
				t.Fatalf("%s: restored state differs from the dequantized blob", want)
			}
			got := f.generate(t, r.Tokens)
			// measured on stories260K: q8 keeps the cold turn, q4 changes
			// it from its sixth token on
			wantText := f.cold
			if p.Bits == 4 {
				wantText = " went to the park. They saw a big tree and a small bird. Max wanted to play with it, but Max was to"
			}
			if got != wantText {
				t.Fatalf("%s fromDisk=%v: %q, want %q (cold %q)", want, fromDisk, got, wantText, f.cold)
			}
		}
	}
}
