package crash

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bg "github.com/dgraph-io/badger/v4"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/internal/testutil"
	"github.com/memosrt/memosrt/textmem"
)

// history is one worker's acknowledged states, in order: states[i] is its
// cube's memories (id → text) after its i-th write, created[i] whether the
// cube existed then, ops[i] the write's kind; index 0 is before the first
// write.
type history struct {
	mu      sync.Mutex
	states  []map[string]string
	created []bool
	ops     []string
}

func (h *history) add(w *worker, o *op) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.states = append(h.states, maps.Clone(w.mem))
	h.created = append(h.created, w.created)
	h.ops = append(h.ops, opNames[o.kind])
}

func (h *history) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.states)
}

// runLoad writes as worker.load does (the same mix of writes and chats),
// recording every acknowledged state in h, until stop is set; every write
// is acknowledged (none is cut off), so the last state is the cube's.
func runLoad(t *testing.T, w *worker, c *client, h *history, stop *atomic.Bool) {
	for !stop.Load() {
		o := w.next()
		if err := w.apply(context.Background(), c, &o); err != nil {
			t.Errorf("%s: %s: %v", w.cube, &o, err)
			return
		}
		if o.kind != opChat {
			h.add(w, &o)
		}
	}
}

// cubeState reads a cube's memories (recorded chat turns left out) from
// a server; created is false for an unknown cube.
func cubeState(t *testing.T, c *client, cube string) (mem map[string]string, created bool) {
	t.Helper()
	var list struct {
		Memories []textmem.Memory `json:"memories"`
	}
	code, err := c.do(context.Background(), "GET", "/v1/cubes/"+cube+"/memories", nil, &list)
	if err != nil {
		t.Fatal(err)
	}
	if code == http.StatusNotFound {
		return map[string]string{}, false
	}
	if code != http.StatusOK {
		t.Fatalf("list %s: %d", cube, code)
	}
	mem = map[string]string{}
	for _, m := range list.Memories {
		if m.Kind != memosrt.KindTurn {
			mem[m.ID] = m.Text
		}
	}
	return mem, true
}

// tierPackStored checks that a cube's tier state, as a server answers it,
// names no pack the activation tier lacks. The server's own tier jobs go on
// meanwhile (a restored copy runs the jobs its snapshot left pending): a
// state that moved on between the two reads (another pack named since) is
// read again.
func tierPackStored(t *testing.T, c *client, cube string) {
	t.Helper()
	tierPack := func() string {
		t.Helper()
		var ts struct {
			PackID string `json:"pack_id"`
		}
		if code, err := c.do(context.Background(), "GET", "/v1/cubes/"+cube+"/tiers?limit=1", nil, &ts); err != nil || code != http.StatusOK {
			t.Fatalf("tiers %s: %d %v", cube, code, err)
		}
		return ts.PackID
	}
	id := tierPack()
	for try := 0; id != ""; try++ {
		var ps struct {
			Packs []struct {
				ID string `json:"id"`
			} `json:"packs"`
		}
		if code, err := c.do(context.Background(), "GET", "/v1/cubes/"+cube+"/pack", nil, &ps); err != nil || code != http.StatusOK {
			t.Fatalf("pack %s: %d %v", cube, code, err)
		}
		var ids []string
		for _, p := range ps.Packs {
			ids = append(ids, p.ID)
		}
		if slices.Contains(ids, id) {
			return
		}
		now := tierPack()
		if now == id || try == 10 {
			t.Errorf("restored cube %s: its tier state names pack %.12s, which is not stored", cube, id)
			return
		}
		t.Logf("restored cube %s: its tier state moved on from pack %.12s to %.12s while checked (a tier job of the restored server)", cube, id, now)
		id = now
	}
}

// snapshotTierPacks checks a restored data directory, before anything
// opens it: each cube's committed tier state (scheduler key s/p/<cube>)
// names a pack whose header is stored (kvcache key k/h/<id>), as the
// backup's snapshot holds them.
func snapshotTierPacks(t *testing.T, dir, keyFile string, ws []*worker) {
	t.Helper()
	key := readKeyFile(t, keyFile)
	db, err := datadir.Open(datadir.Options{Dir: dir, EncryptionKey: key})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	}()
	named := 0
	err = db.Badger().View(func(txn *bg.Txn) error {
		for _, w := range ws {
			item, err := txn.Get([]byte("s/p/" + w.cube))
			if errors.Is(err, bg.ErrKeyNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			var st struct {
				PackID string `json:"pack_id"`
			}
			if err := item.Value(func(v []byte) error { return json.Unmarshal(v, &st) }); err != nil {
				return err
			}
			if st.PackID == "" {
				continue
			}
			named++
			if _, err := txn.Get([]byte(keyPackHeader + st.PackID)); errors.Is(err, bg.ErrKeyNotFound) {
				t.Errorf("backup: cube %s's tier state names pack %.12s, whose header the snapshot lacks", w.cube, st.PackID)
			} else if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("backup: %d tier states name a pack, each stored", named)
}

// memosrtCLI runs the binary and returns its combined output.
func memosrtCLI(args ...string) (string, error) {
	out, err := exec.Command(binPath, args...).CombinedOutput()
	return string(out), err
}

// TestBackupUnderLoad takes `memosrt backup` of a served directory while
// four clients write to it (memory adds, updates and deletes, pack warms,
// chats, cube deletes), restores the file with `memosrt restore` into a
// new directory and serves that: each cube holds exactly the memories of
// a state its client reached at or after the last write acknowledged
// before the backup began (a consistent snapshot: never a mix of two
// moments, nothing acknowledged lost), each tier pack named is stored (in
// the restored directory, and as the served copy answers), and
// the raw checks of the crash harness pass (whole pack blobs, no orphan
// chunks, index and records agree, cubes isolated). Then: a backup taken
// offline after the server is killed restores to exactly the last state;
// a truncated file and a non-empty target are refused and leave nothing
// behind. The encrypted case runs with --encrypt-key-file throughout and
// checks that the file holds no memory text in plaintext.
func TestBackupUnderLoad(t *testing.T) {
	key := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, []byte(strings.Repeat("a5", 32)), 0o600); err != nil {
		t.Fatal(err)
	}
	seed := uint64(envInt(t, "MEMOSRT_CRASH_SEED", int(time.Now().UnixNano()%1e9)))
	t.Logf("MEMOSRT_CRASH_SEED=%d", seed)
	t.Run("plain", func(t *testing.T) { backupUnderLoad(t, seed, "") })
	t.Run("encrypted", func(t *testing.T) { backupUnderLoad(t, seed+1, key) })
}

func backupUnderLoad(t *testing.T, seed uint64, keyFile string) {
	model := testmodels.Stories(t)
	db := t.TempDir()
	var keyArgs []string
	if keyFile != "" {
		keyArgs = []string{"--encrypt-key-file", keyFile}
	}
	p := startServer(t, db, model, keyFile)
	if err := p.waitReady(); err != nil {
		t.Fatalf("%v\n%s", err, p.stderr.String())
	}
	c := &client{base: "http://" + p.addr, hc: &http.Client{Timeout: 60 * time.Second}}
	ws := make([]*worker, workers)
	hs := make([]*history, workers)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for i := range ws {
		ws[i] = &worker{id: i, cube: fmt.Sprintf("backup%d", i), mem: map[string]string{},
			rng: rand.New(rand.NewPCG(seed, uint64(i)))}
		hs[i] = &history{states: []map[string]string{{}}, created: []bool{false}, ops: []string{""}}
		wg.Go(func() { runLoad(t, ws[i], c, hs[i], &stop) })
	}
	// some history first, so that the backup has something to be wrong about
	testutil.WaitFor(t, "20 acknowledged writes per client", func() bool {
		for _, h := range hs {
			if h.len() < 21 && !t.Failed() {
				return false
			}
		}
		return true
	})
	before := make([]int, workers) // states acknowledged before the backup began
	for i, h := range hs {
		before[i] = h.len()
	}
	file := filepath.Join(t.TempDir(), "online.backup")
	out, err := memosrtCLI(append([]string{"backup", "--db", db, "-o", file}, keyArgs...)...)
	during := 0
	for i, h := range hs {
		during += h.len() - before[i]
	}
	stop.Store(true)
	wg.Wait()
	if err != nil {
		t.Fatalf("memosrt backup: %v\n%s\nserver:\n%s", err, out, p.stderr.String())
	}
	if !strings.Contains(out, "online, through the memosrt serve") {
		t.Fatalf("memosrt backup did not go through the server:\n%s", out)
	}
	t.Logf("%s(%d writes acknowledged while it ran)", out, during)
	if keyFile != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for i, h := range hs {
			for _, text := range h.states[before[i]-1] {
				n++
				if bytes.Contains(b, []byte(text)) {
					t.Fatalf("the encrypted backup holds %q in plaintext", text)
				}
			}
		}
		t.Logf("none of %d memory texts in the encrypted file", n)
	}

	restored := filepath.Join(t.TempDir(), "restored")
	if out, err := memosrtCLI(append([]string{"restore", file, "--db", restored}, keyArgs...)...); err != nil {
		t.Fatalf("memosrt restore: %v\n%s", err, out)
	}
	snapshotTierPacks(t, restored, keyFile, ws)
	rp := startServer(t, restored, model, keyFile)
	if err := rp.waitReady(); err != nil {
		t.Fatalf("restored: %v\n%s", err, rp.stderr.String())
	}
	rc := &client{base: "http://" + rp.addr, hc: &http.Client{Timeout: 60 * time.Second}}
	for i, w := range ws {
		mem, created := cubeState(t, rc, w.cube)
		h := hs[i]
		at := -1
		for k := before[i] - 1; k < len(h.states); k++ {
			if created == h.created[k] && maps.Equal(mem, h.states[k]) {
				at = k
				break
			}
		}
		if at < 0 {
			t.Errorf("restored cube %s (%d memories, created %v) is none of its client's states from write %d (of %d) on; acknowledged before the backup: %d memories (created %v); the writes after it: %v",
				w.cube, len(mem), created, before[i]-1, len(h.states)-1, len(h.states[before[i]-1]), h.created[before[i]-1], h.ops[before[i]:])
			continue
		}
		t.Logf("cube %s: the copy is the state after write %d (%d acknowledged before the backup, %d in all): %d memories",
			w.cube, at, before[i]-1, len(h.states)-1, len(mem))
		if created {
			tierPackStored(t, rc, w.cube)
		}
	}
	rp.kill(t)
	var st stats
	rawCheck(t, 0, restored, keyFile, ws, &st)

	// offline: the served directory after a SIGKILL (its serve.json left
	// behind names a server that is gone)
	p.kill(t)
	file2 := filepath.Join(t.TempDir(), "offline.backup")
	if out, err := memosrtCLI(append([]string{"backup", "--db", db, "-o", file2}, keyArgs...)...); err != nil || !strings.Contains(out, "(offline)") {
		t.Fatalf("offline memosrt backup: %v\n%s", err, out)
	}
	restored2 := filepath.Join(t.TempDir(), "restored2")
	if out, err := memosrtCLI(append([]string{"restore", file2, "--db", restored2}, keyArgs...)...); err != nil {
		t.Fatalf("memosrt restore: %v\n%s", err, out)
	}
	rp2 := startServer(t, restored2, model, keyFile)
	if err := rp2.waitReady(); err != nil {
		t.Fatalf("restored: %v\n%s", err, rp2.stderr.String())
	}
	rc2 := &client{base: "http://" + rp2.addr, hc: &http.Client{Timeout: 60 * time.Second}}
	for i, w := range ws {
		mem, created := cubeState(t, rc2, w.cube)
		last := len(hs[i].states) - 1
		if created != hs[i].created[last] || !maps.Equal(mem, hs[i].states[last]) {
			t.Errorf("offline backup: cube %s holds %d memories (created %v), its last acknowledged state %d (created %v)",
				w.cube, len(mem), created, len(hs[i].states[last]), hs[i].created[last])
		}
	}
	rp2.kill(t)

	// refused: a truncated file, a target that holds something
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(t.TempDir(), "cut.backup")
	if err := os.WriteFile(cut, b[:len(b)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(t.TempDir(), "target")
	out, err = memosrtCLI(append([]string{"restore", cut, "--db", target}, keyArgs...)...)
	if err == nil || !strings.Contains(out, "damaged or truncated") {
		t.Errorf("restore of a truncated file: %v\n%s", err, out)
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Errorf("a refused restore left %s: %v", target, err)
	}
	if ents, _ := os.ReadDir(filepath.Dir(target)); len(ents) != 0 {
		t.Errorf("a refused restore left %d entries beside the target", len(ents))
	}
	out, err = memosrtCLI(append([]string{"restore", file, "--db", restored2}, keyArgs...)...)
	if err == nil || !strings.Contains(out, "not empty") {
		t.Errorf("restore onto a data directory: %v\n%s", err, out)
	}
}
