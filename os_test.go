package memosrt

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	bg "github.com/dgraph-io/badger/v4"

	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/layout"
	"github.com/memosrt/memosrt/lora"
	"github.com/memosrt/memosrt/pipeline"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/textmem"
)

// fakeClock is a scheduler.Clock a test moves.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

var epoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// testOptions are Options over stories260K in dir: n_ctx 1024, 2 threads,
// no fsync, no background loop (tests tick themselves).
func testOptions(t testing.TB, dir string) Options {
	return Options{Dir: dir, Model: testmodels.Stories(t), NoSync: true, NoScheduler: true,
		Engine: runtime.Options{NCtx: 1024, Threads: 2}, Parallel: 2, MinPersistTokens: 1}
}

// openOS opens o and closes it at the end of the test, checking Close.
func openOS(t testing.TB, o Options) *OS {
	t.Helper()
	os, err := Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return os
}

func addMemories(t testing.TB, o *OS, cube string, texts ...string) []textmem.Memory {
	t.Helper()
	var out []textmem.Memory
	for _, s := range texts {
		m, err := o.AddMemory(context.Background(), cube, textmem.Memory{Text: s})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

func generate(t testing.TB, o *OS, req Request) *Response {
	t.Helper()
	if req.NumPredict == 0 {
		req.NumPredict = 32
	}
	res, err := o.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Text == "" {
		t.Fatal("empty output")
	}
	return res
}

// Greedy output with the restored pack is byte-identical to a cold prefill
// of the same prompt, for several memory sets.
func TestRestoredPackEqualsColdPrefill(t *testing.T) {
	opts := testOptions(t, t.TempDir())
	opts.Parallel = 1
	o := openOS(t, opts)
	addMemories(t, o, "scrub", "Tom has a kite.")
	sets := map[string][]string{
		"pets":   {"Lily has a dog named Max.", "Max is brown and very fast.", "Lily walks Max every morning."},
		"food":   {"Tom loves red apples.", "Tom does not like fish.", "Tom's mom bakes bread on Sunday.", "Tom eats soup when it rains."},
		"school": {"Sue is in the second grade.", "Sue's teacher is Mr. Brown."},
	}
	ctx := context.Background()
	for cube, texts := range sets {
		t.Run(cube, func(t *testing.T) {
			addMemories(t, o, cube, texts...)
			st, err := o.Warm(ctx, cube, WarmOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if st.Memories != len(texts) || len(st.Packs) != 1 {
				t.Fatalf("warm: %d memories in the pack, %d packs; want %d, 1", st.Memories, len(st.Packs), len(texts))
			}
			pack := st.Packs[0]
			for _, prompt := range []string{"Once upon a time,", "One day, the sun"} {
				cold := generate(t, o, Request{Cube: cube, Prompt: prompt, NoCache: true})
				// the only slot holds another cube's state; the restore reads the blob from Badger
				generate(t, o, Request{Cube: "scrub", Prompt: "Tom", NumPredict: 2})
				o.KVCache().DropRAM()
				warm := generate(t, o, Request{Cube: cube, Prompt: prompt})
				if cold.Usage.CachedTokens != 0 || warm.Usage.CachedTokens != pack.NTokens || warm.CacheSource != SourceRestored {
					t.Fatalf("cached tokens: cold %d, warm %d (%s), pack %d", cold.Usage.CachedTokens, warm.Usage.CachedTokens, warm.CacheSource, pack.NTokens)
				}
				if warm.PackMemories != len(texts) || warm.PackID != pack.ID {
					t.Fatalf("pack memories %d, pack %s; want %d, %s", warm.PackMemories, warm.PackID, len(texts), pack.ID)
				}
				if warm.Text != cold.Text || warm.Usage.EvalTokens != cold.Usage.EvalTokens {
					t.Fatalf("prompt %q:\ncold %q\nwarm %q", prompt, cold.Text, warm.Text)
				}
			}
		})
	}
}

// Every KV source gives the cold output: a stored pack restored, the
// resident pack shared in, the previous turn still held by the slot, and
// the conversation pack restored after a restart.
func TestEveryKVSourceEqualsCold(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	opts := testOptions(t, dir)
	opts.Parallel = 1
	o, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	addMemories(t, o, "c", "Lily has a dog named Max.", "Max likes to run in the park.")
	turn := []Message{{Role: "user", Content: "Once upon a time, Lily"}}
	if _, err := o.Warm(ctx, "c", WarmOptions{Resident: true}); err != nil {
		t.Fatal(err)
	}
	// cold with the same prompt: the pack holds the memories now
	cold, err := o.Chat(ctx, Request{Cube: "c", Messages: turn, NumPredict: 24, NoCache: true, NoPersist: true})
	if err != nil {
		t.Fatal(err)
	}
	if cold.PackMemories != 2 {
		t.Fatalf("the cold prompt carries %d pack memories, want 2", cold.PackMemories)
	}
	// the only slot now holds another cube's state: nothing of c to reuse there
	addMemories(t, o, "other", "Tom has a kite.")
	generate(t, o, Request{Cube: "other", Prompt: "Tom", NumPredict: 4})
	check := func(name, source string, req Request, want *Response) *Response {
		t.Helper()
		req.Cube, req.NumPredict = "c", 24
		res, err := o.Chat(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if res.CacheSource != source || res.Usage.CachedTokens == 0 {
			t.Fatalf("%s: source %q with %d cached tokens (refused %q), want %q", name, res.CacheSource, res.Usage.CachedTokens, res.Refused, source)
		}
		if res.Text != want.Text {
			t.Fatalf("%s:\n got %q\nwant %q", name, res.Text, want.Text)
		}
		return res
	}
	// the resident pack (warmed resident) is shared into the slot
	check("resident", SourceResident, Request{Messages: turn, NoPersist: true}, cold)
	// the same prompt again: the slot holds prompt and output
	check("slot", SourceSlot, Request{Messages: turn}, cold)
	// a second turn, cold and then through a restart (its conversation pack)
	turn2 := append(slices.Clone(turn), Message{Role: "assistant", Content: cold.Text}, Message{Role: "user", Content: "Then Max"})
	cold2, err := o.Chat(ctx, Request{Cube: "c", Messages: turn2, NumPredict: 24, NoCache: true, NoPersist: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Close(ctx); err != nil {
		t.Fatal(err)
	}
	o = openOS(t, opts)
	for _, p := range o.KVCache().List("") {
		h, _, _, _ := o.KVCache().State(p.ID)
		t.Logf("pack %.8s %s %d tokens\n%v", p.ID, p.Label, p.NTokens, h.Tokens[60:])
	}
	check("conversation pack after restart", SourceRestored, Request{Messages: turn2}, cold2)
}

// The cube's pack is rendered after the preamble, and retrieval adds
// memories outside it before the last user turn.
func TestRenderedPrompt(t *testing.T) {
	o := openOS(t, testOptions(t, t.TempDir()))
	ctx := context.Background()
	packed := addMemories(t, o, "c", "Lily has a dog.", "Tom bakes bread on Sunday.")
	if _, err := o.Warm(ctx, "c", WarmOptions{}); err != nil {
		t.Fatal(err)
	}
	m := addMemories(t, o, "c", "Sue plays the violin.")[0]
	res, err := o.Generate(ctx, Request{Cube: "c", Prompt: "Does Sue play the violin?", RenderOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	want := layout.DefaultPreamble + "\n- Lily has a dog.\n- Tom bakes bread on Sunday.\n" +
		"\nAlso relevant:\n- Sue plays the violin.\nDoes Sue play the violin?"
	if res.Rendered != want {
		t.Fatalf("rendered:\n%q\nwant\n%q", res.Rendered, want)
	}
	if res.PackMemories != 2 || res.Retrieved != 1 {
		t.Fatalf("pack %d, retrieved %d; want 2, 1 (%s)", res.PackMemories, res.Retrieved, m.ID)
	}
	if !slices.Equal(res.PackMemoryIDs, []string{packed[0].ID, packed[1].ID}) || !slices.Equal(res.RetrievedIDs, []string{m.ID}) {
		t.Fatalf("pack ids %q, retrieved ids %q; want %s %s, %s", res.PackMemoryIDs, res.RetrievedIDs, packed[0].ID, packed[1].ID, m.ID)
	}
}

// TestPacksStayInTheirCube: a run in one cube never restores another
// cube's pack. Without scoping, the restored length reported as cached
// tokens would tell a cube that guesses another cube's memory text, token
// by token, how much of the guess is right; kvcache seeds each cube's
// prefix chain with its scope.
func TestPacksStayInTheirCube(t *testing.T) {
	o := openOS(t, testOptions(t, t.TempDir()))
	ctx := context.Background()
	addMemories(t, o, "alice", "Alice's PIN is 4821.", "Alice likes tea.")
	st, err := o.Warm(ctx, "alice", WarmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	alice := st.Packs[0].ID
	for _, guess := range []string{"Alice's PIN is 4821.", "Alice's PIN is 1111."} {
		addMemories(t, o, "mallory", guess)
		if _, err := o.Warm(ctx, "mallory", WarmOptions{}); err != nil {
			t.Fatal(err)
		}
		res := generate(t, o, Request{Cube: "mallory", Prompt: "hi", NumPredict: 2})
		if res.PackID == alice {
			t.Errorf("guess %q: cube mallory restored cube alice's pack (%d cached tokens)", guess, res.Usage.CachedTokens)
		}
		if err := o.DeleteCube(ctx, "mallory"); err != nil {
			t.Fatal(err)
		}
	}
}

// Requests are checked before anything runs: unknown cubes, bad roles,
// prompts past the context, an OS without a model, a closed OS.
func TestBadRequests(t *testing.T) {
	ctx := context.Background()
	o := openOS(t, testOptions(t, t.TempDir()))
	var fe *FieldError
	for _, c := range []struct {
		name  string
		req   Request
		chat  bool
		err   error
		field string
	}{
		{"unknown cube", Request{Cube: "ghost", Prompt: "x"}, false, ErrUnknownCube, ""},
		{"bad cube name", Request{Cube: "a b", Prompt: "x"}, false, nil, "cube"},
		{"no messages", Request{}, true, nil, "messages"},
		{"bad role", Request{Messages: []Message{{Role: "robot", Content: "x"}}}, true, nil, "messages[0].role"},
		{"too long", Request{Prompt: strings.Repeat("the cat sat on the mat. ", 300)}, false, nil, "prompt"},
		{"empty raw prompt", Request{Raw: true}, false, nil, "prompt"},
		{"context token", Request{Prompt: "x", Context: []int32{1, 99999}}, false, nil, "context[1]"},
		{"repeat window", Request{Prompt: "x", Sampling: Sampling{RepeatPenalty: 1.1, RepeatLastN: -2}}, false, nil, "options.repeat_last_n"},
		{"unregistered adapter", Request{Prompt: "x", Adapters: []lora.Spec{{Name: "a", Scale: 1}}}, false, lora.ErrNotFound, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var err error
			if c.chat {
				_, err = o.Chat(ctx, c.req)
			} else {
				_, err = o.Generate(ctx, c.req)
			}
			switch {
			case c.err != nil && !errors.Is(err, c.err):
				t.Fatalf("err %v, want %v", err, c.err)
			case c.field != "" && (!errors.As(err, &fe) || fe.Field != c.field):
				t.Fatalf("err %v, want a FieldError on %s", err, c.field)
			}
		})
	}
	t.Run("no model", func(t *testing.T) {
		m := openOS(t, Options{Dir: t.TempDir(), NoSync: true})
		if _, err := m.Generate(ctx, Request{Prompt: "x"}); !errors.Is(err, ErrNoModel) {
			t.Fatalf("err %v, want ErrNoModel", err)
		}
		if _, err := m.AddMemory(ctx, "c", textmem.Memory{Text: "memories work without a model"}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("closed", func(t *testing.T) {
		m, err := Open(ctx, Options{Dir: t.TempDir(), NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if err := m.Close(ctx); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if _, err := m.Memories(ctx, "c"); !errors.Is(err, ErrClosed) {
			t.Fatalf("err %v, want ErrClosed", err)
		}
	})
	t.Run("options", func(t *testing.T) {
		err := Options{Parallel: -1, ResidentCells: -5, Model: "x.gguf", Upstream: &UpstreamOptions{}}.Validate()
		for _, want := range []string{"Dir is empty", "Parallel -1", "ResidentCells -5", "both set", "Upstream needs URL"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Validate: %v; want it to say %q", err, want)
			}
		}
	})
}

// Streamed text arrives on the caller's goroutine, in order, and equals
// the whole response; an OnText error ends the generation with it.
func TestStreaming(t *testing.T) {
	o := openOS(t, testOptions(t, t.TempDir()))
	ctx := context.Background()
	var chunks []string
	res, err := o.Generate(ctx, Request{Prompt: "Once upon a time", NumPredict: 40, OnText: func(s string) error {
		chunks = append(chunks, s)
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(chunks, "") != res.Text || len(chunks) == 0 {
		t.Fatalf("chunks %q joined != text %q", chunks, res.Text)
	}
	stop := errors.New("reader gone")
	n := 0
	_, err = o.Generate(ctx, Request{Prompt: "Once upon a time", NumPredict: 200, OnText: func(string) error {
		n++
		return stop
	}})
	if !errors.Is(err, stop) || n != 1 {
		t.Fatalf("err %v after %d chunks, want %v after 1", err, n, stop)
	}
}

// Close waits for running requests; one started after Close is refused.
func TestCloseDrains(t *testing.T) {
	ctx := context.Background()
	o, err := Open(ctx, testOptions(t, t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		var once sync.Once
		_, err := o.Generate(ctx, Request{Prompt: "Once upon a time", NumPredict: 300, OnText: func(string) error {
			once.Do(func() { close(started) })
			return nil
		}})
		done <- err
	}()
	<-started
	if err := o.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the running request failed: %v", err)
	}
	if _, err := o.Generate(ctx, Request{Prompt: "x"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// TestConcurrentRunWarmDelete: chats, pack warms and memory adds and
// deletes run at once on one cube. Afterwards every pack is whole, a cached
// run gives the cold run's greedy output, and another cube is untouched.
func TestConcurrentRunWarmDelete(t *testing.T) {
	ctx := context.Background()
	opts := testOptions(t, t.TempDir())
	opts.Parallel = 3
	o := openOS(t, opts)
	addMemories(t, o, "a", "Lily has a dog named Max.", "Max likes to run in the park.")
	addMemories(t, o, "b", "Tom has a red kite.")
	bWarm, err := o.Warm(ctx, "b", WarmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bPack := bWarm.Packs[0]
	bList, _ := o.Memories(ctx, "b")
	run := func(cube string, noCache bool) *Response {
		// not recorded: the test follows the memories it writes
		res, err := o.Chat(ctx, Request{Cube: cube, Messages: []Message{{Role: "user", Content: "Once upon a time"}},
			NoCache: noCache, NumPredict: 24, NoPersist: true, Record: RecordNone})
		if err != nil {
			t.Error(err)
			return &Response{}
		}
		return res
	}
	bCold := run("b", true)
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 6 {
			run("a", false)
		}
	})
	wg.Go(func() {
		for range 6 {
			if _, err := o.Warm(ctx, "a", WarmOptions{}); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Go(func() {
		for i := range 8 {
			m, err := o.AddMemory(ctx, "a", textmem.Memory{Text: fmt.Sprintf("Note %d: the sky was %d shades of blue.", i, i)})
			if err != nil {
				t.Error(err)
				continue
			}
			if i%2 == 0 {
				if err := o.DeleteMemory(ctx, "a", m.ID); err != nil {
					t.Error(err)
				}
			}
		}
	})
	wg.Go(func() {
		for range 4 {
			if _, err := o.Tick(ctx); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if _, err := o.Tick(ctx); err != nil { // deleted members leave the pack
		t.Fatal(err)
	}
	for _, in := range o.KVCache().List("") {
		blob, err := o.KVCache().Blob(in.ID)
		if err == nil {
			_, _, err = kvcache.Decode(blob)
		}
		if err != nil {
			t.Errorf("pack %.12s of %s: %v", in.ID, in.Label, err)
		}
	}
	warm, cold := run("a", false), run("a", true)
	if warm.Text != cold.Text || warm.Refused != "" {
		t.Fatalf("cube a after the storm: cached %q (refused %q), cold %q", warm.Text, warm.Refused, cold.Text)
	}
	if list, _ := o.Memories(ctx, "a"); len(list) != 2+4 {
		t.Fatalf("cube a holds %d memories, want 6", len(list))
	}
	if list, _ := o.Memories(ctx, "b"); !slices.EqualFunc(list, bList, func(x, y textmem.Memory) bool { return x.ID == y.ID && x.Text == y.Text }) {
		t.Fatalf("cube b changed: %+v", list)
	}
	o.KVCache().DropRAM()
	if got := run("b", false); got.Text != bCold.Text || got.Usage.CachedTokens < bPack.NTokens {
		t.Fatalf("cube b: %q (%d cached tokens, %s), cold %q", got.Text, got.Usage.CachedTokens, got.CacheSource, bCold.Text)
	}
	if !slices.ContainsFunc(o.KVCache().List("b"), func(i kvcache.Info) bool { return i.ID == bPack.ID }) {
		t.Fatal("cube b's pack is gone")
	}
}

// TestDeleteCubeDuringChat: a cube deleted while one of its chats decodes
// keeps nothing of it: no conversation pack is stored after the delete and
// no slot state is reused, also by a new cube of the same name (which then
// prefills the same turn from scratch).
func TestDeleteCubeDuringChat(t *testing.T) {
	ctx := context.Background()
	o := openOS(t, testOptions(t, t.TempDir()))
	addMemories(t, o, "c", "Lily has a dog named Max.", "Max likes to run in the park.")
	turn := []Message{{Role: "user", Content: "Once upon a time, Lily and Max"}}
	deleted := false
	res, err := o.Chat(ctx, Request{Cube: "c", Messages: turn, NumPredict: 24, OnText: func(string) error {
		if !deleted {
			deleted = true
			if err := o.DeleteCube(ctx, "c"); err != nil {
				t.Errorf("DeleteCube during the chat: %v", err)
			}
		}
		return nil
	}})
	if err != nil || !deleted {
		t.Fatalf("chat: %v (deleted during it: %v)", err, deleted)
	}
	o.p.WaitWrites()
	packs, err := o.AllPacks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(packs) != 0 {
		t.Fatalf("packs left after the cube was deleted: %+v", packs)
	}
	addMemories(t, o, "c", "Lily has a dog named Max.", "Max likes to run in the park.")
	again, err := o.Chat(ctx, Request{Cube: "c", Messages: turn, NumPredict: 24})
	if err != nil {
		t.Fatal(err)
	}
	if again.Usage.CachedTokens != 0 || again.CacheSource != SourceNone || again.Text != res.Text {
		t.Fatalf("the new cube reused the deleted one's state: %d cached tokens from %q; text %q, first %q",
			again.Usage.CachedTokens, again.CacheSource, again.Text, res.Text)
	}
}

// TestConversationBudget: conversation packs stay within
// Options.ConvBytes, the oldest deleted first; every pack stored is either
// kept or counted as evicted, and the newest conversation's pack is kept.
func TestConversationBudget(t *testing.T) {
	ctx := context.Background()
	opts := testOptions(t, t.TempDir())
	opts.ConvBytes = 200_000 // two or three packs of about 80 kB
	o := openOS(t, opts)
	addMemories(t, o, "c", "Lily has a dog named Max.")
	starts := []string{"Once upon a time", "One day, Tom", "The sun was hot", "Sue had a red ball", "In the park"}
	var last string
	for _, s := range starts {
		res, err := o.Chat(ctx, Request{Cube: "c", Messages: []Message{{Role: "user", Content: s}}, NumPredict: 96, NoCache: true})
		if err != nil {
			t.Fatal(err)
		}
		o.p.WaitWrites()
		last = kvcache.PackID(kvcache.ScopedKey(o.prim().ConfigKey, "c"), res.Context)
		st := o.Stats()
		if st.ConvBytes > opts.ConvBytes || st.ConvPacks == 0 {
			t.Fatalf("after %q: %d conversation packs, %d bytes (budget %d)", s, st.ConvPacks, st.ConvBytes, opts.ConvBytes)
		}
	}
	st := o.Stats()
	if int64(st.ConvPacks)+st.ConvEvicted != int64(len(starts)) || st.ConvEvicted == 0 {
		t.Fatalf("%d packs kept + %d evicted, want %d stored", st.ConvPacks, st.ConvEvicted, len(starts))
	}
	if !o.hasPack(last) {
		t.Fatalf("the newest conversation's pack %s was evicted", last[:12])
	}
}

// TestRestoreFallback: a stored pack whose bytes fail their check between
// the lookup and the restore is refused, the prompt is prefilled (greedy
// output equals cold), Stats counts the fallback, and the pack, proven
// bad, is deleted.
func TestRestoreFallback(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := testOptions(t, dir)
	opts.ResidentSeqs = -1 // nothing restored at Open: the pack is read at the request
	o := openOS(t, opts)
	addMemories(t, o, "c", "Lily has a dog named Max.", "Max likes to run in the park.", "Lily's favourite food is apple pie.")
	st, err := o.Warm(ctx, "c", WarmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pack := st.Packs[0].ID
	req := Request{Cube: "c", Prompt: "Once upon a time", NumPredict: 24, NoUsage: true}
	cold := generate(t, o, Request{Cube: "c", Prompt: req.Prompt, NumPredict: 24, NoCache: true, NoUsage: true})
	if err := o.Close(ctx); err != nil {
		t.Fatal(err)
	}
	o = openOS(t, opts) // empty RAM level: the blob is read from disk
	// flip one byte of every chunk of the pack's blob
	prefix := []byte("k/b/" + pack + "/")
	err = o.DB().Badger().Update(func(txn *bg.Txn) error {
		it := txn.NewIterator(bg.IteratorOptions{Prefix: prefix, PrefetchValues: true})
		defer it.Close()
		var keys, vals [][]byte
		for it.Rewind(); it.Valid(); it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			v[len(v)/2] ^= 0xff
			keys, vals = append(keys, it.Item().KeyCopy(nil)), append(vals, v)
		}
		if len(keys) == 0 {
			return errors.New("no chunk found")
		}
		for i := range keys {
			if err := txn.Set(keys[i], vals[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	res := generate(t, o, req)
	if res.Refused == "" || res.Usage.CachedTokens != 0 || res.Text != cold.Text {
		t.Fatalf("corrupt pack: refused %q, %d cached tokens, text %q (cold %q)", res.Refused, res.Usage.CachedTokens, res.Text, cold.Text)
	}
	if n := o.Stats().Fallbacks; n != 1 {
		t.Fatalf("fallbacks %d, want 1", n)
	}
	if o.hasPack(pack) {
		t.Fatal("a pack proven corrupt was kept")
	}
}

// TestEncryptedExport: an OS encrypted at rest exports sealed archives: the
// memory text does not appear, an OS with the same key imports it whole,
// and one without a key or with another key refuses it (ErrBadArchive).
func TestEncryptedExport(t *testing.T) {
	ctx := context.Background()
	key := bytes.Repeat([]byte{0x5a}, 32)
	opts := Options{Dir: t.TempDir(), NoSync: true, EncryptionKey: key}
	o := openOS(t, opts)
	want := addMemories(t, o, "c", "Lily's secret recipe is apple pie with cinnamon.", "Max hides his bone under the oak tree.")
	var buf bytes.Buffer
	if err := o.ExportCube(ctx, "c", &buf); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(buf.Bytes(), []byte("secret recipe")) || bytes.Contains(buf.Bytes(), []byte("memories.jsonl")) {
		t.Fatal("the archive of an encrypted OS is readable")
	}
	for name, k := range map[string][]byte{"no key": nil, "another key": bytes.Repeat([]byte{0x11}, 32)} {
		other := openOS(t, Options{Dir: t.TempDir(), NoSync: true, EncryptionKey: k})
		if _, err := other.ImportCube(ctx, bytes.NewReader(buf.Bytes()), ImportOptions{}); !errors.Is(err, ErrBadArchive) {
			t.Fatalf("%s: import %v, want ErrBadArchive", name, err)
		}
		if cubes, _ := other.Cubes(ctx); len(cubes) != 0 {
			t.Fatalf("%s: a refused import left cubes %v", name, cubes)
		}
	}
	same := openOS(t, Options{Dir: t.TempDir(), NoSync: true, EncryptionKey: key})
	if _, err := same.ImportCube(ctx, bytes.NewReader(buf.Bytes()), ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := same.Memories(ctx, "c")
	if err != nil || len(got) != len(want) {
		t.Fatalf("imported %d memories (%v), want %d", len(got), err, len(want))
	}
	for i := range want {
		if got[i].Text != want[i].Text {
			t.Fatalf("memory %d: %q, want %q", i, got[i].Text, want[i].Text)
		}
	}
}

// TestExportImportKeepsIDs: an imported cube holds the exported memories
// with their ids, times, versions, tags and texts; the same archive imports
// again under another name (ids are per cube); an archive whose memory id
// is malformed or repeated is refused (ErrBadArchive) and leaves no cube.
func TestExportImportKeepsIDs(t *testing.T) {
	ctx := context.Background()
	o := openOS(t, Options{Dir: t.TempDir(), NoSync: true})
	want := addMemories(t, o, "c", "Lily has a dog named Max.", "Max hides his bone under the oak tree.")
	edited, err := o.PatchMemory(ctx, "c", want[0].ID, textmem.Patch{Tags: &[]string{"pets"}})
	if err != nil {
		t.Fatal(err)
	}
	want[0] = edited
	var buf bytes.Buffer
	if err := o.ExportCube(ctx, "c", &buf); err != nil {
		t.Fatal(err)
	}
	other := openOS(t, Options{Dir: t.TempDir(), NoSync: true})
	for _, name := range []string{"", "c2"} {
		res, err := other.ImportCube(ctx, bytes.NewReader(buf.Bytes()), ImportOptions{Cube: name})
		if err != nil {
			t.Fatal(err)
		}
		got, err := other.Memories(ctx, res.Cube)
		if err != nil || len(got) != len(want) {
			t.Fatalf("cube %s: %d memories (%v), want %d", res.Cube, len(got), err, len(want))
		}
		for i, w := range want {
			g := got[i]
			if g.ID != w.ID || g.Text != w.Text || !g.Created.Equal(w.Created) || !g.Updated.Equal(w.Updated) ||
				g.Version != w.Version || !slices.Equal(g.Tags, w.Tags) || g.Cube != res.Cube {
				t.Fatalf("cube %s memory %d: %+v, exported %+v", res.Cube, i, g, w)
			}
			if m, err := other.Memory(ctx, res.Cube, w.ID); err != nil || m.Text != w.Text {
				t.Fatalf("cube %s: get %s by its exported id: %+v %v", res.Cube, w.ID, m, err)
			}
		}
	}
	// the same id twice, and a malformed id: refused whole
	var man, mems []byte
	tr := tar.NewReader(bytes.NewReader(buf.Bytes()))
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		b, _ := io.ReadAll(tr)
		switch h.Name {
		case "manifest.json":
			man = b
		case "memories.jsonl":
			mems = b
		}
	}
	first, _, _ := bytes.Cut(mems, []byte("\n"))
	var m textmem.Memory
	if err := json.Unmarshal(first, &m); err != nil {
		t.Fatal(err)
	}
	m.ID = "not-an-id"
	bad, _ := json.Marshal(m)
	for name, body := range map[string][]byte{"repeated id": append(append(append([]byte{}, first...), '\n'), first...), "malformed id": bad} {
		var ab bytes.Buffer
		tw := tar.NewWriter(&ab)
		for _, f := range []struct {
			name string
			data []byte
		}{{"manifest.json", man}, {"memories.jsonl", body}} {
			tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o600, Size: int64(len(f.data))})
			tw.Write(f.data)
		}
		tw.Close()
		fresh := openOS(t, Options{Dir: t.TempDir(), NoSync: true})
		if _, err := fresh.ImportCube(ctx, &ab, ImportOptions{}); !errors.Is(err, ErrBadArchive) {
			t.Fatalf("%s: import %v, want ErrBadArchive", name, err)
		}
		if cubes, _ := fresh.Cubes(ctx); len(cubes) != 0 {
			t.Fatalf("%s: a refused import left cubes %v", name, cubes)
		}
	}
}

// prim is the primary model's loaded state (tests reach below the OS).
func (o *OS) prim() pipeline.Primary {
	p, _ := o.p.Primary()
	return p
}

// hasPack reports whether this node stores pack id.
func (o *OS) hasPack(id string) bool {
	i, ok := o.KVCache().Info(id)
	return ok && !i.Remote
}
