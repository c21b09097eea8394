package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/internal/testfs"
	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/textmem"
)

// fullDiskText is memory i's text: about 1.5 KiB of words drawn by a
// generator seeded with i, so that no two are near-duplicates (which Add
// merges).
func fullDiskText(i int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Note %d: Lily saw birds at the lake.", i)
	x := uint64(i)*0x9e3779b97f4a7c15 + 1
	for b.Len() < 1500 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		fmt.Fprintf(&b, " w%x", x%(1<<20))
	}
	return b.String()
}

// A data directory on a 20 MiB tmpfs, filled through the API with memory
// adds and pack warms: the writes that meet the full disk answer 507 with
// a message naming the directory and the free space, the server stays up
// and answers reads (get, list, search) and generation (with and without
// the cube) with 200; once an 11 MiB filler file is removed the next add
// and warm succeed; after a restart every acknowledged memory is there,
// byte for byte.
func TestFullDisk(t *testing.T) {
	mnt := testfs.Tmpfs(t, "24m")
	dir := filepath.Join(mnt, "data")
	filler := filepath.Join(mnt, "filler")
	// 11 MiB, leaving the data directory 13 MiB: when filling stops, free
	// space may be up to 7.6 MiB under the reserve (seen: a memtable flush
	// takes space and adds a table to the compaction reserve at once, and
	// a new write-ahead or value-log file raises the reserve), and freeing
	// the filler must bring it above
	if w := testfs.Fill(t, filler, 11<<20); w != 11<<20 {
		t.Fatalf("filler: %d bytes", w)
	}
	e := newEnv(t, envConfig{dir: dir})
	// memory i goes to cube c<i/40>; a cube is warmed once it holds 40
	cubeOf := func(i int) string { return fmt.Sprintf("c%d", i/40) }
	type ackedMem struct{ cube, text string }
	acked := map[string]ackedMem{} // memory id → cube, text
	// post sends one request and returns its status and, when it failed,
	// the error message; out receives a success's body
	refusals := 0 // 507s answered
	post := func(u string, body, out any) (int, string) {
		var raw json.RawMessage
		code := do(t, "POST", u, body, &raw)
		if code == http.StatusInsufficientStorage {
			refusals++
		}
		if code < 300 {
			if err := json.Unmarshal(raw, out); err != nil {
				t.Fatalf("%s: %v", u, err)
			}
			return code, ""
		}
		var oe oaiError
		if err := json.Unmarshal(raw, &oe); err != nil || oe.Error.Message == "" {
			t.Fatalf("%s: %d %s", u, code, raw)
		}
		return code, oe.Error.Message
	}
	addTo := func(cube, text string) (int, string) {
		var m textmem.Memory
		code, msg := post(e.url()+"/v1/cubes/"+cube+"/memories", map[string]any{"text": text}, &m)
		if code == http.StatusCreated {
			acked[m.ID] = ackedMem{cube, m.Text} // a merge answers the merged memory
		}
		return code, msg
	}
	warmed := map[string]bool{}
	warm := func(cube string) (int, string) {
		var st map[string]any
		code, msg := post(e.url()+"/v1/cubes/"+cube+"/pack", nil, &st)
		if code == http.StatusOK {
			warmed[cube] = true
		}
		return code, msg
	}
	// spare cubes, never warmed: a warm of one must store a new pack (a
	// pack is scoped to its cube)
	const spares = 20
	for k := range spares {
		if code, m := addTo(fmt.Sprintf("s%d", k), fmt.Sprintf("Spare note %d.", k)); code != http.StatusCreated {
			t.Fatalf("spare %d: %d %s", k, code, m)
		}
	}
	i, warms, spare := 0, 0, 0
	// fill adds memories and warms packs until an add and then a warm that
	// must store a new pack are both refused, and returns their messages.
	// Badger's flushes and compactions give space back now and then, so a
	// write refused once may pass later: filling goes on until then.
	fill := func() (addMsg, warmMsg string) {
		for tries := 0; tries < 20000; tries++ {
			code, m := addTo(cubeOf(i), fullDiskText(i))
			cube := ""
			switch code {
			case http.StatusCreated:
				if i++; i%40 != 0 {
					continue
				}
				cube = cubeOf(i - 1)
			case http.StatusInsufficientStorage:
				addMsg, cube = m, cubeOf(i)
				if i%40 == 0 || warmed[cube] { // no such cube yet, or its pack is stored
					if spare == spares {
						t.Fatal("every spare cube was warmed")
					}
					cube = fmt.Sprintf("s%d", spare)
				}
			default:
				t.Fatalf("add %d: %d %s", i, code, m)
			}
			switch wcode, wm := warm(cube); wcode {
			case http.StatusOK:
				warms++
				if cube == fmt.Sprintf("s%d", spare) {
					spare++
				}
			case http.StatusInsufficientStorage:
				if warmMsg = wm; code == http.StatusInsufficientStorage {
					return addMsg, warmMsg
				}
			default:
				t.Fatalf("warm %s: %d %s", cube, wcode, wm)
			}
		}
		t.Fatalf("the disk never filled: %d memories", i)
		return
	}
	want := "not enough free disk space in " + dir + ": "
	checkMsgs := func(addMsg, warmMsg string) {
		t.Helper()
		for _, m := range []string{addMsg, warmMsg} {
			if !strings.Contains(m, want) || !strings.Contains(m, " free, ") || !strings.Contains(m, " needed") {
				t.Fatalf("507 message %q does not name %s and the free space", m, dir)
			}
		}
	}
	addMsg, warmMsg := fill()
	t.Logf("%d memories and %d warms acknowledged; then %q and %q", len(acked), warms, addMsg, warmMsg)
	if len(acked) < 100+spares || warms < 2 { // 210–260 and 4–6 seen (uncompressed tables; the reserve counts them twice)
		t.Fatalf("%d memories and %d warms acknowledged", len(acked), warms)
	}
	checkMsgs(addMsg, warmMsg)

	// reads and generation while writes are refused
	var id string
	for id = range acked {
		break
	}
	var got textmem.Memory
	if code := do(t, "GET", e.url()+"/v1/cubes/"+acked[id].cube+"/memories/"+id, nil, &got); code != http.StatusOK || got.Text != acked[id].text {
		t.Fatalf("get %s: %d, text equal: %v", id, code, got.Text == acked[id].text)
	}
	var hits struct{ Hits []textmem.Hit }
	if code := do(t, "POST", e.url()+"/v1/cubes/c0/search", map[string]any{"query": "birds at the lake", "k": 3}, &hits); code != http.StatusOK || len(hits.Hits) != 3 {
		t.Fatalf("search: %d, %d hits", code, len(hits.Hits))
	}
	gen := map[string]any{"model": testModel, "prompt": "Once upon a time", "stream": false, "options": map[string]any{"num_predict": 8, "temperature": 0}}
	var gr struct{ Response string }
	if code := do(t, "POST", e.url()+"/api/generate", gen, &gr); code != http.StatusOK || gr.Response == "" {
		t.Fatalf("generate: %d %q", code, gr.Response)
	}
	const chatPrompt = "Where did Lily see the birds?"
	chat := map[string]any{"model": testModel, "stream": false, "options": map[string]any{"num_predict": 8, "temperature": 0},
		"messages": []map[string]string{{"role": "user", "content": chatPrompt}}}
	var cr struct{ Message struct{ Content string } }
	if code := do(t, "POST", e.url()+"/api/chat", chat, &cr, CubeHeader, "c0"); code != http.StatusOK || cr.Message.Content == "" {
		t.Fatalf("chat in the cube: %d %q", code, cr.Message.Content)
	}
	// the disk is still full (Badger may have given space back meanwhile:
	// fill goes on until both are refused again)
	checkMsgs(fill())

	// each 507 is a refusal counted in /metrics (background rewrites
	// skipped for want of space count there too)
	if got := readMetric(t, e, "memosrt_no_space_refused_total"); got < float64(refusals) || refusals < 4 {
		t.Fatalf("memosrt_no_space_refused_total = %v after %d 507s", got, refusals)
	}

	// space returns: the next writes succeed
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if code, m := addTo(cubeOf(i), fullDiskText(i)); code != http.StatusCreated {
		t.Fatalf("add after 11 MiB freed: %d %s", code, m)
	}
	if code, m := warm(cubeOf(i)); code != http.StatusOK {
		t.Fatalf("warm after 11 MiB freed: %d %s", code, m)
	}

	// a restart finds every acknowledged memory
	e.close(t)
	e = newEnv(t, envConfig{dir: dir})
	listed, seen := 0, 0
	var cubes []string
	for k := range spares {
		cubes = append(cubes, fmt.Sprintf("s%d", k))
	}
	for c := 0; c <= i/40; c++ {
		cubes = append(cubes, fmt.Sprintf("c%d", c))
	}
	for _, c := range cubes {
		var list struct{ Memories []textmem.Memory }
		if code := do(t, "GET", e.url()+"/v1/cubes/"+c+"/memories", nil, &list); code != http.StatusOK {
			t.Fatalf("list %s after the restart: %d", c, code)
		}
		listed += len(list.Memories)
		for _, m := range list.Memories {
			switch want, ok := acked[m.ID]; {
			case ok && want.cube == c && m.Text == want.text:
				seen++
			case c == "c0" && strings.HasPrefix(m.Text, chatPrompt):
				// the chat's turn (prompt and answer), recorded once there
				// was room: a write its 200 acknowledged
				listed--
			default:
				t.Errorf("not acknowledged: %s %s %q", c, m.ID, m.Text)
			}
		}
	}
	if seen != len(acked) || listed != len(acked) {
		t.Fatalf("after the restart: %d memories, %d of the %d acknowledged byte for byte", listed, seen, len(acked))
	}
}

// Starting on a data directory whose filesystem has no free space left
// does not die by a signal: memosrt.Open (what serve runs, model loaded)
// returns ErrNoSpace with a message naming the directory, in a child
// process so that a SIGBUS could not kill the test binary.
func TestOpenFullDisk(t *testing.T) {
	if dir := os.Getenv("MEMOSRT_TEST_OPEN_DIR"); dir != "" {
		o, err := memosrt.Open(context.Background(), memosrt.Options{Dir: dir, Model: testmodels.Stories(t), ModelName: testModel})
		if err != nil {
			fmt.Printf("open: %v\nno space: %v\n", err, errors.Is(err, memosrt.ErrNoSpace))
			os.Exit(3)
		}
		fmt.Println("opened")
		o.Close(context.Background())
		os.Exit(0)
	}
	mnt := testfs.Tmpfs(t, "20m")
	dir := filepath.Join(mnt, "data")
	e := newEnv(t, envConfig{dir: dir})
	for i := range 50 {
		if code := do(t, "POST", e.url()+"/v1/cubes/lily/memories", map[string]any{"text": fullDiskText(i)}, nil); code != http.StatusCreated {
			t.Fatalf("add %d: %d", i, code)
		}
	}
	e.close(t)
	testfs.Fill(t, filepath.Join(mnt, "filler"), 1<<30)
	cmd := exec.Command(os.Args[0], "-test.run=^TestOpenFullDisk$")
	cmd.Env = append(os.Environ(), "MEMOSRT_TEST_OPEN_DIR="+dir)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("child: %v (want exit status 3), output:\n%s", err, out)
	}
	if !strings.Contains(string(out), "not enough free disk space to open "+dir+": 0.0 MiB (0 bytes) free, ") || !strings.Contains(string(out), "no space: true") {
		t.Fatalf("child said:\n%s", out)
	}
}
