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

// memosrt check over a data directory with two cubes (806 and 4
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
	words := strings.Fields("amber basil cedar delta ember fjord garnet hazel indigo juniper kestrel lilac maple nectar onyx pepper quartz russet sable thistle umber violet willow xenon yarrow zinnia")
	// memory IDs follow the time of the Add, so the notes' records come
	// first in the SST: more than a block (datadir's 132 KiB), so that the
	// block QUARRY's record is in holds neither the first keys (the pack's
	// records) nor bob's
	for i := range 800 {
		text := fmt.Sprintf("alice filed note %d about %s and %s near the %s", i, words[i%26], words[(i*7)%26], words[(i*11)%26])
		if _, err := mem.Add(ctx, "alice", textmem.Memory{Text: text}); err != nil {
			t.Fatal(err)
		}
	}
	for i, w := range []string{"lighthouse", "orchard", "QUARRY", "harbour", "meadow", "glacier"} {
		if _, err := mem.Add(ctx, "alice", textmem.Memory{Text: fmt.Sprintf("alice keeps the %s ledger number %d", w, i)}); err != nil {
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
	for _, want := range []string{"cube alice: ok (806 memories)", "cube bob: ok (4 memories)", "no damage found"} {
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

// incompressible returns n bytes of xorshift64 output from seed (a pack
// state stored raw, in the value log) with mark copied in at 100 KiB.
func incompressible(n int, seed uint64, mark string) []byte {
	b := make([]byte, n)
	x := seed
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
	copy(b[100<<10:], mark)
	return b
}

// checkSections runs memosrt check on dir, wants exit status 1, and
// returns its report's lines by section ("cube NAME: ..." → NAME, "not of
// a cube:" and "of a cube that cannot be known:" as they are).
func checkSections(t *testing.T, dir string) (string, map[string]string) {
	t.Helper()
	out, err := runCLI(t, "check", "--db", dir)
	if exitCode(err) != 1 {
		t.Fatalf("check of a damaged directory: %v\n%s", err, out)
	}
	sections := map[string]string{}
	cur := ""
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(l, "cube "):
			cur, _, _ = strings.Cut(strings.TrimPrefix(l, "cube "), ":")
		case strings.HasPrefix(l, "  "):
			sections[cur] += l + "\n"
		case strings.HasSuffix(l, ":"):
			cur = l
		}
	}
	return out, sections
}

// memosrt check over damage in the first block of the one SST, whose
// first keys are no cube's (a small pack's, kept in the LSM tree): the
// SST's line is under the cube whose keys the damaged block holds (alice's
// texts), by the block's key range from the table's index, never under
// "not of a cube"; the pack, whose record is in the block too, is named
// as of a cube that cannot be known.
func TestCheckFirstSSTBlock(t *testing.T) {
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
	for i := range 1000 { // more than a block (datadir's 132 KiB): bob's keys are not in the first
		if _, err := mem.Add(ctx, "alice", textmem.Memory{Text: fmt.Sprintf("alice files note %d about the harbour ledger", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := mem.Add(ctx, "bob", textmem.Memory{Text: "bob mends the kettle"}); err != nil {
		t.Fatal(err)
	}
	kv, err := kvcache.Open(db, kvcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, kvcache.Header{Label: "bob", Scope: "bob", NTokens: 3, Tokens: []int32{1, 2, 3}}, incompressible(200<<10, 7, "SMALL")[:1<<10]); err != nil {
		t.Fatal(err)
	}
	kv.Close()
	mem.Close()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	ssts, _ := filepath.Glob(filepath.Join(dir, "*.sst"))
	if len(ssts) != 1 {
		t.Fatalf("%d SSTs, want 1", len(ssts))
	}
	data, err := os.ReadFile(ssts[0])
	if err != nil {
		t.Fatal(err)
	}
	for i := 64; i < 80; i++ { // inside the first block
		data[i] ^= 0xff
	}
	if err := os.WriteFile(ssts[0], data, 0o644); err != nil {
		t.Fatal(err)
	}
	sst := filepath.Base(ssts[0])
	out, sections := checkSections(t, dir)
	t.Logf("check:\n%s", out)
	if strings.Contains(out, "not of a cube:") {
		t.Errorf("check puts damage under no cube:\n%s", out)
	}
	// level 0, or below if Close's flush was compacted before it returned
	line := "SST " + sst + " (level "
	if !strings.Contains(sections["alice"], line) || !strings.Contains(sections["alice"], "its damaged block 0 holds keys from \"k/b/") {
		t.Errorf("cube alice lacks the SST's first block:\n%s", out)
	}
	if strings.Contains(sections["bob"], line) {
		t.Errorf("cube bob, none of whose texts is in the damaged block, named for it:\n%s", out)
	}
	if u := sections["of a cube that cannot be known:"]; !strings.Contains(u, line) || !strings.Contains(u, "it may hold KV packs (recomputed when next used)") {
		t.Errorf("the pack records of the damaged block not named as of an unknown cube:\n%s", out)
	}
}

// memosrt check over the first of two packs in the newest value-log file
// damaged: the report names the second pack (cube carol), which reads
// back now but follows the damaged entry, as cut off at the next open to
// write. Opening the directory to write cuts it: a second check finds
// carol's pack damaged.
func TestCheckNamesPacksCutFromValueLog(t *testing.T) {
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
	for _, c := range []string{"bob", "carol"} {
		if _, err := mem.Add(ctx, c, textmem.Memory{Text: c + " mends the kettle"}); err != nil {
			t.Fatal(err)
		}
	}
	kv, err := kvcache.Open(db, kvcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	n := datadir.MaxValueThreshold + (256 << 10)
	bobPack, err := kv.Put(ctx, kvcache.Header{Label: "bob", Scope: "bob", NTokens: 3, Tokens: []int32{1, 2, 3}}, incompressible(n, 88172645463325252, "BOB-PAYLOAD-MARK"))
	if err != nil {
		t.Fatal(err)
	}
	carolPack, err := kv.Put(ctx, kvcache.Header{Label: "carol", Scope: "carol", NTokens: 3, Tokens: []int32{4, 5, 6}}, incompressible(n, 2463534242, "CAROL-PAYLOAD-MARK"))
	if err != nil {
		t.Fatal(err)
	}
	kv.Close()
	mem.Close()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	vlog := flipAt(t, dir, "*.vlog", []byte("BOB-PAYLOAD-MARK"), 1000, 8)
	out, sections := checkSections(t, dir)
	t.Logf("check:\n%s", out)
	if !strings.Contains(sections["bob"], "value log "+vlog) || !strings.Contains(sections["bob"], "KV pack "+bobPack.ID[:12]+" damaged") {
		t.Errorf("cube bob lacks its damaged pack:\n%s", out)
	}
	cut := "KV pack " + carolPack.ID[:12] + " follows the damaged entry at byte "
	if !strings.Contains(sections["carol"], cut) || !strings.Contains(sections["carol"], "the next open to write (memosrt serve, check --repair) cuts it off") {
		t.Errorf("cube carol lacks its pack cut off at the next open:\n%s", out)
	}
	if strings.Contains(sections["bob"], "follows the damaged entry") {
		t.Errorf("bob's damaged pack also named as cut off:\n%s", out)
	}
	if t.Failed() {
		return
	}
	// the open to write cuts the newest value-log file as predicted
	db, err = datadir.Open(datadir.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	out, sections = checkSections(t, dir)
	if !strings.Contains(sections["carol"], "KV pack "+carolPack.ID[:12]+" (label \"carol\")") {
		t.Fatalf("check after an open to write: carol's pack not damaged:\n%s", out)
	}
}
