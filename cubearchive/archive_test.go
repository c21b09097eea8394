package cubearchive

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/memosrt/memosrt/internal/sealed"
	"github.com/memosrt/memosrt/textmem"
)

var key = bytes.Repeat([]byte{0x5a}, 32)

func fixture() (Manifest, []textmem.Memory, [][]byte) {
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC)
	mems := []textmem.Memory{
		{ID: "0000000000000001aaaaaaaa", Cube: "c", Text: "Lily has a dog named Max.", Kind: "fact", Tags: []string{"pets"},
			Created: t0, Updated: t0.Add(time.Minute), Version: 2, Confidence: 0.75},
		{ID: "0000000000000002bbbbbbbb", Cube: "c", Text: "<b>Max</b> & \"the park\"\nsecond line \u00e9", Created: t0, Updated: t0,
			EventTime: t0.Add(-time.Hour), Version: 1, Turns: []string{"t1", "t2"}},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	small, large := make([]byte, 1000), make([]byte, 3*sealed.RecordSize+17) // large spans sealed records
	for _, b := range [][]byte{small, large} {
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
	}
	man := Manifest{Cube: "c", Description: "a cube", Metadata: map[string]string{"owner": "lily"}, Created: t0,
		Exported: t0.Add(time.Hour), Packs: []Pack{{ID: "p1", Label: "c", NTokens: 40}, {ID: "p2", Label: "conv:c", NTokens: 900}},
		TierMembers: []string{mems[0].ID, mems[1].ID}, Pinned: []string{mems[1].ID}, Resident: true}
	return man, mems, [][]byte{small, large}
}

func archive(t *testing.T, k []byte) []byte {
	t.Helper()
	man, mems, blobs := fixture()
	var buf bytes.Buffer
	if err := Write(&buf, k, man, mems, blobs); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// readAll reads the whole archive: its manifest, memories and packs.
func readAll(r io.Reader, k []byte) (Manifest, []textmem.Memory, map[string][]byte, error) {
	ar, err := NewReader(r, k)
	if err != nil {
		return Manifest{}, nil, nil, err
	}
	var mems []textmem.Memory
	for {
		m, err := ar.NextMemory()
		if err == io.EOF {
			break
		}
		if err != nil {
			return ar.Manifest(), mems, nil, err
		}
		mems = append(mems, m)
	}
	packs := map[string][]byte{}
	for {
		name, blob, err := ar.NextPack()
		if err == io.EOF {
			break
		}
		if err != nil {
			return ar.Manifest(), mems, packs, err
		}
		packs[name] = blob
	}
	return ar.Manifest(), mems, packs, nil
}

// TestRoundTrip: what Write writes, plain and sealed, reads back the same:
// the manifest with Format, Version, Memories and pack files filled in,
// every memory byte for byte in its JSON, every blob byte for byte; a
// sealed archive does not show its text, and a plain one reads also under
// a key.
func TestRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name           string
		writeKey, read []byte
	}{{"plain", nil, nil}, {"plain read with a key", nil, key}, {"sealed", key, key}} {
		t.Run(tc.name, func(t *testing.T) {
			b := archive(t, tc.writeKey)
			if sealedOut := sealed.IsSealed(b); sealedOut != (tc.writeKey != nil) {
				t.Fatalf("sealed %v", sealedOut)
			}
			if tc.writeKey != nil && (bytes.Contains(b, []byte("Lily")) || bytes.Contains(b, []byte(memoriesName))) {
				t.Fatal("a sealed archive shows its contents")
			}
			wantMan, wantMems, wantBlobs := fixture()
			man, mems, packs, err := readAll(bytes.NewReader(b), tc.read)
			if err != nil {
				t.Fatal(err)
			}
			wantMan.Format, wantMan.Version, wantMan.Memories = "memosrt-cube", 1, 2
			wantMan.Packs[0].File, wantMan.Packs[1].File = "packs/p1.mkvb", "packs/p2.mkvb"
			if !reflect.DeepEqual(man, wantMan) {
				t.Fatalf("manifest %+v\nwant %+v", man, wantMan)
			}
			if len(mems) != len(wantMems) {
				t.Fatalf("%d memories, want %d", len(mems), len(wantMems))
			}
			for i := range mems {
				got, _ := json.Marshal(mems[i])
				want, _ := json.Marshal(wantMems[i])
				if !bytes.Equal(got, want) || !reflect.DeepEqual(mems[i], wantMems[i]) {
					t.Fatalf("memory %d: %s\nwant %s", i, got, want)
				}
			}
			if len(packs) != 2 || !bytes.Equal(packs["packs/p1.mkvb"], wantBlobs[0]) || !bytes.Equal(packs["packs/p2.mkvb"], wantBlobs[1]) {
				t.Fatalf("packs: %d entries, p1 %d bytes, p2 %d bytes; want 1000 and %d", len(packs), len(packs["packs/p1.mkvb"]), len(packs["packs/p2.mkvb"]), len(wantBlobs[1]))
			}
		})
	}
}

// TestLayout: a plain archive is a tar of manifest.json, memories.jsonl
// (one memory per line, HTML not escaped) and packs/<id>.mkvb, in that
// order, each entry stamped with the export time.
func TestLayout(t *testing.T) {
	man, mems, _ := fixture()
	tr := tar.NewReader(bytes.NewReader(archive(t, nil)))
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if !h.ModTime.Equal(man.Exported.Truncate(time.Second)) {
			t.Fatalf("%s: mod time %v, want %v", h.Name, h.ModTime, man.Exported)
		}
		if h.Name == memoriesName {
			b, _ := io.ReadAll(tr)
			lines := bytes.Split(b, []byte("\n"))
			if len(lines) != 3 || len(lines[2]) != 0 {
				t.Fatalf("memories.jsonl is not 2 lines:\n%s", b)
			}
			for i, m := range mems {
				var got textmem.Memory
				if err := json.Unmarshal(lines[i], &got); err != nil || !reflect.DeepEqual(got, m) {
					t.Fatalf("line %d: %s (%v), want %+v", i+1, lines[i], err, m)
				}
			}
			if want := `"text":"<b>Max</b> & \"the park\"\nsecond line é"`; !bytes.Contains(lines[1], []byte(want)) {
				t.Fatalf("line 2: %s, want it to hold %s", lines[1], want)
			}
		}
	}
	if want := []string{"manifest.json", "memories.jsonl", "packs/p1.mkvb", "packs/p2.mkvb"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("entries %v, want %v", names, want)
	}
}

// TestWriteRefuses: a blob count unlike the pack count, and a pack id that
// would name an entry outside packs/, are refused before anything is
// written.
func TestWriteRefuses(t *testing.T) {
	man, mems, blobs := fixture()
	var buf bytes.Buffer
	if err := Write(&buf, nil, man, mems, blobs[:1]); err == nil || buf.Len() != 0 {
		t.Fatalf("1 blob for 2 packs: %v, %d bytes written", err, buf.Len())
	}
	man.Packs[1].ID = "../x"
	if err := Write(&buf, nil, man, mems, blobs); err == nil || buf.Len() != 0 {
		t.Fatalf("pack id ../x: %v, %d bytes written", err, buf.Len())
	}
}

type entry struct {
	name string
	data []byte
	size int64 // the header's size when data is not written (0: len(data))
}

// rawTar writes entries as a tar; an entry with size set gets only its
// header, and the stream ends there.
func rawTar(entries ...entry) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		if e.size > 0 {
			tw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: e.size, Typeflag: tar.TypeReg})
			return buf.Bytes()
		}
		tw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.data)), Typeflag: tar.TypeReg})
		tw.Write(e.data)
	}
	tw.Close()
	return buf.Bytes()
}

func manifestJSON(t *testing.T, edit func(*Manifest)) []byte {
	t.Helper()
	man, _, _ := fixture()
	man.Format, man.Version, man.Memories, man.Packs = Format, Version, 1, []Pack{}
	if edit != nil {
		edit(&man)
	}
	b, err := json.Marshal(man)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRefuses: every kind of bad archive is refused with an error wrapping
// ErrBad that says what is wrong, at the step that reads it: entries out
// of order or missing, an entry over its limit, a wrong format or version,
// a memory count unlike the manifest's, bad JSON, a truncated stream,
// plain or sealed, and a sealed one under the wrong key or none.
func TestRefuses(t *testing.T) {
	_, mems, _ := fixture()
	mem, _ := json.Marshal(mems[0])
	man := manifestJSON(t, nil)
	plain, seal := archive(t, nil), archive(t, key)
	for _, tc := range []struct {
		name string
		in   []byte
		key  []byte
		want string // the error's text
	}{
		{"empty stream", nil, nil, "memosrt: bad cube archive: empty archive"},
		{"memories first", rawTar(entry{name: "memories.jsonl", data: mem}, entry{name: "manifest.json", data: man}), nil,
			`memosrt: bad cube archive: entry "memories.jsonl" where "manifest.json" belongs`},
		{"pack before memories", rawTar(entry{name: "manifest.json", data: man}, entry{name: "packs/p1.mkvb", data: []byte("x")}), nil,
			`memosrt: bad cube archive: entry "packs/p1.mkvb" where "memories.jsonl" belongs`},
		{"no memories entry", rawTar(entry{name: "manifest.json", data: man}), nil, "memosrt: bad cube archive: no memories.jsonl"},
		{"stray entry after memories", rawTar(entry{name: "manifest.json", data: man}, entry{name: "memories.jsonl", data: mem}, entry{name: "notes.txt", data: []byte("x")}), nil,
			`memosrt: bad cube archive: unexpected entry "notes.txt"`},
		{"wrong format", rawTar(entry{name: "manifest.json", data: manifestJSON(t, func(m *Manifest) { m.Format = "other" })}), nil,
			`memosrt: bad cube archive: format "other", want "memosrt-cube"`},
		{"wrong version", rawTar(entry{name: "manifest.json", data: manifestJSON(t, func(m *Manifest) { m.Version = 2 })}), nil,
			"memosrt: bad cube archive: version 2 (this build reads 1)"},
		{"manifest not JSON", rawTar(entry{name: "manifest.json", data: []byte("{")}), nil,
			"memosrt: bad cube archive: manifest: unexpected end of JSON input"},
		{"oversized manifest", rawTar(entry{name: "manifest.json", size: MaxManifestBytes + 1}), nil,
			"memosrt: bad cube archive: manifest.json is 67108865 bytes"},
		{"oversized pack", rawTar(entry{name: "manifest.json", data: man}, entry{name: "memories.jsonl", data: mem}, entry{name: "packs/p1.mkvb", size: MaxPackBytes + 1}), nil,
			"memosrt: bad cube archive: packs/p1.mkvb is 8589934593 bytes"},
		{"oversized memory line", rawTar(entry{name: "manifest.json", data: man}, entry{name: "memories.jsonl", data: bytes.Repeat([]byte("x"), MaxMemoryBytes+1)}), nil,
			"memosrt: bad cube archive: memories.jsonl: bufio.Scanner: token too long"},
		{"memory not JSON", rawTar(entry{name: "manifest.json", data: man}, entry{name: "memories.jsonl", data: append(append(mem, "\n\n"...), "{"...)}), nil,
			"memosrt: bad cube archive: memories.jsonl line 2: unexpected end of JSON input"},
		{"more memories than the manifest says", rawTar(entry{name: "manifest.json", data: man}, entry{name: "memories.jsonl", data: append(append(mem, '\n'), mem...)}), nil,
			"memosrt: bad cube archive: 2 memories, manifest says 1"},
		{"truncated in a pack", plain[:len(plain)-3000], nil, "memosrt: bad cube archive: packs/p2.mkvb: unexpected EOF"},
		{"sealed, truncated", seal[:len(seal)-100], key, "memosrt: bad cube archive: packs/p2.mkvb: sealed: stream does not open under this key (wrong key, altered or truncated): truncated"},
		{"sealed, another key", seal, bytes.Repeat([]byte{0x11}, 32), "memosrt: bad cube archive: sealed: stream does not open under this key (wrong key, altered or truncated)"},
		{"sealed, no key", seal, nil, "memosrt: bad cube archive: the archive is encrypted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, _, err := readAll(bytes.NewReader(tc.in), tc.key)
			if !errors.Is(err, ErrBad) || err.Error() != tc.want {
				t.Fatalf("error %v\nwant %s (wrapping ErrBad)", err, tc.want)
			}
		})
	}
	if _, _, _, err := readAll(bytes.NewReader(seal), nil); !errors.Is(err, ErrNeedKey) {
		t.Fatalf("sealed without a key: %v, want ErrNeedKey", err)
	}
	if _, _, _, err := readAll(bytes.NewReader(seal[:len(seal)-100]), key); !errors.Is(err, sealed.ErrOpen) {
		t.Fatalf("sealed, truncated: %v, want it to wrap sealed.ErrOpen", err)
	}
	if _, _, _, err := readAll(bytes.NewReader(plain[:len(plain)-3000]), nil); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated: %v, want it to wrap io.ErrUnexpectedEOF", err)
	}
}

// TestReaderSequence: memories are yielded one at a time before any pack,
// NextPack refuses to skip them, and an error sticks: every later call
// returns it.
func TestReaderSequence(t *testing.T) {
	ar, err := NewReader(bytes.NewReader(archive(t, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ar.NextPack(); err == nil || errors.Is(err, ErrBad) || !strings.Contains(err.Error(), "before NextMemory returned io.EOF") {
		t.Fatalf("NextPack before the memories: %v", err)
	}
	m, err := ar.NextMemory()
	if err != nil || m.Text != "Lily has a dog named Max." {
		t.Fatalf("first memory %q, %v", m.Text, err)
	}
	if _, err := ar.NextMemory(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := ar.NextMemory(); err != io.EOF {
			t.Fatalf("after the last memory: %v, want io.EOF", err)
		}
	}
	for _, want := range []string{"packs/p1.mkvb", "packs/p2.mkvb"} {
		if name, _, err := ar.NextPack(); err != nil || name != want {
			t.Fatalf("pack %q, %v; want %s", name, err, want)
		}
	}
	if _, _, err := ar.NextPack(); err != io.EOF {
		t.Fatalf("after the last pack: %v, want io.EOF", err)
	}

	_, mems, _ := fixture()
	mem, _ := json.Marshal(mems[0])
	bad := rawTar(entry{name: "manifest.json", data: manifestJSON(t, nil)}, entry{name: "memories.jsonl", data: append(mem, "\n{"...)})
	ar, err = NewReader(bytes.NewReader(bad), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ar.NextMemory(); err != nil {
		t.Fatal(err)
	}
	first, err := ar.NextMemory()
	if !errors.Is(err, ErrBad) || first.ID != "" {
		t.Fatalf("bad line: %+v, %v", first, err)
	}
	if _, err2 := ar.NextMemory(); err2 != err {
		t.Fatalf("NextMemory after an error: %v, want %v", err2, err)
	}
	if _, _, err2 := ar.NextPack(); err2 != err {
		t.Fatalf("NextPack after an error: %v, want %v", err2, err)
	}
}
