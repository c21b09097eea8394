package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/textmem"
)

// flipAt XORs n bytes at the first occurrence of needle (plus off) in the
// newest file of dir matching glob that holds it; returns the file name.
func flipAt(t *testing.T, dir, glob string, needle []byte, off, n int) string {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(dir, glob))
	slices.Sort(names)
	for i := len(names) - 1; i >= 0; i-- {
		data, err := os.ReadFile(names[i])
		if err != nil {
			t.Fatal(err)
		}
		at := bytes.Index(data, needle)
		if at < 0 {
			continue
		}
		for j := range n {
			data[at+off+j] ^= 0x01
		}
		if err := os.WriteFile(names[i], data, 0o644); err != nil {
			t.Fatal(err)
		}
		return filepath.Base(names[i])
	}
	t.Fatalf("no %s of %s holds %q", glob, dir, needle)
	return ""
}

// memosrt check over a data directory with two cubes (206 and 4
// memories) and a pack: clean,
// it exits 0 and lists each cube's memories. Then one bit in a memory's
// text in its SST (cube alice) and 8 bytes of a pack's payload in the
// newest value-log file (cube bob's pack): it exits 1 naming cube alice
// (the SST, its lost key range, the memories its statistics miss) and
// cube bob (the value-log entry and the pack). --repair deletes the pack
// and rebuilds alice's index and reports the memories that cannot be
// saved; a second check still names the SST (left in place) but not the
// pack, and bob's 4 memories are intact.
func TestCheckCommand(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := datadir.Open(datadir.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	mem, err := textmem.Open(db, textmem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range []string{"lighthouse", "orchard", "QUARRY", "harbour", "meadow", "glacier"} {
		if _, err := mem.Add(ctx, "alice", textmem.Memory{Text: fmt.Sprintf("alice keeps the %s ledger number %d", w, i)}); err != nil {
			t.Fatal(err)
		}
	}
	words := strings.Fields("amber basil cedar delta ember fjord garnet hazel indigo juniper kestrel lilac maple nectar onyx pepper quartz russet sable thistle umber violet willow xenon yarrow zinnia")
	for i := range 200 { // enough for an SST of many 4 KiB blocks
		text := fmt.Sprintf("alice filed note %d about %s and %s near the %s", i, words[i%26], words[(i*7)%26], words[(i*11)%26])
		if _, err := mem.Add(ctx, "alice", textmem.Memory{Text: text}); err != nil {
			t.Fatal(err)
		}
	}
	bob := map[string]string{}
	addBob := func(w string) {
		m, err := mem.Add(ctx, "bob", textmem.Memory{Text: "bob mends the " + w + " every spring"})
		if err != nil {
			t.Fatal(err)
		}
		bob[m.ID] = m.Text
	}
	addBob("violin")
	addBob("kettle")
	kv, err := kvcache.Open(db, kvcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	state := make([]byte, datadir.MaxValueThreshold+(256<<10)) // raw codec (no saving): stored as is, in the value log
	x := uint64(88172645463325252)                             // xorshift64: incompressible, so stored raw
	for i := range state {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		state[i] = byte(x)
	}
	copy(state[100<<10:], "PACK-PAYLOAD-MARK")
	info, err := kv.Put(ctx, kvcache.Header{Label: "bob", Scope: "bob", NTokens: 3, Tokens: []int32{1, 2, 3}}, state)
	if err != nil {
		t.Fatal(err)
	}
	addBob("compass")
	addBob("lantern")
	kv.Close()
	mem.Close()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	out := must(t, "check", "--db", dir)
	for _, want := range []string{"cube alice: ok (206 memories)", "cube bob: ok (4 memories)", "no damage found"} {
		if !strings.Contains(out, want) {
			t.Fatalf("check of an intact directory lacks %q:\n%s", want, out)
		}
	}

	sst := flipAt(t, dir, "*.sst", []byte("QUARRY"), 2, 1)
	vlog := flipAt(t, dir, "*.vlog", []byte("PACK-PAYLOAD-MARK"), 1000, 8)
	out, err = runCLI(t, "check", "--db", dir)
	if exitCode(err) != 1 {
		t.Fatalf("check of a damaged directory: %v\n%s", err, out)
	}
	for _, want := range []string{
		"cube alice: DAMAGED", "SST " + sst, "memories counted by the cube's statistics do not read back",
		"cube bob: DAMAGED", "value log " + vlog, "KV pack " + info.ID[:12] + " damaged",
		"memosrt: damage found",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check lacks %q:\n%s", want, out)
		}
	}
	if t.Failed() {
		return
	}

	out, err = runCLI(t, "check", "--db", dir, "--repair")
	if exitCode(err) != 1 || !strings.Contains(out, "deleted (recomputed when next used)") ||
		!strings.Contains(out, "cube alice: DAMAGED") || !strings.Contains(out, "index rebuilt from") ||
		!strings.Contains(out, "memories that cannot be saved:") {
		t.Fatalf("check --repair: %v\n%s", err, out)
	}
	// the damaged SST stays (a compaction would drop every key after its
	// damaged block, other cubes' too): still reported; the pack is gone
	out, err = runCLI(t, "check", "--db", dir)
	if exitCode(err) != 1 || !strings.Contains(out, "SST "+sst) || strings.Contains(out, "KV pack "+info.ID[:12]+" damaged") ||
		!strings.Contains(out, "cube bob: ok (4 memories)") {
		t.Fatalf("check after --repair: %v\n%s", err, out)
	}

	db, err = datadir.Open(datadir.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	mem, err = textmem.Open(db, textmem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	list, err := mem.List(ctx, "bob")
	if err != nil || len(list) != 4 {
		t.Fatalf("bob after repair: %d memories, %v; want 4", len(list), err)
	}
	for _, m := range list {
		if bob[m.ID] != m.Text {
			t.Errorf("bob's %s: %q, want %q", m.ID, m.Text, bob[m.ID])
		}
	}
	if _, err := mem.List(ctx, "alice"); err != nil {
		t.Fatalf("alice after repair: %v", err)
	}
}
