package memosrt

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/scheduler"
)

func loadedNames(o *OS) []string {
	var out []string
	for _, m := range o.Models() {
		if m.Loaded {
			out = append(out, m.Name)
		}
	}
	return out
}

func sameNames(got []string, want ...string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

// TestModelBudget: ModelBytes makes room by unloading the least recently
// used idle model; a model in use is never unloaded for another, which is
// then refused with ErrBusy, and nothing is unloaded for nothing.
func TestModelBudget(t *testing.T) {
	stories := testmodels.Stories(t)
	tiny := testmodels.Path(t, "llama-2-tiny-random.gguf")
	// a copy of stories: a third model of the same size
	dup := filepath.Join(t.TempDir(), "dup.gguf")
	b, err := os.ReadFile(stories)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dup, b, 0o644); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(stories)
	tt, _ := os.Stat(tiny)
	opts := testOptions(t, t.TempDir())
	opts.Models = []ModelSpec{{Name: "tiny", Path: tiny}, {Name: "dup", Path: dup}}
	opts.ModelBytes = st.Size() + tt.Size() // stories and tiny fit; dup and tiny fit; all three do not
	o := openOS(t, opts)
	ctx := context.Background()
	if got := loadedNames(o); !sameNames(got, "stories260K") {
		t.Fatalf("loaded at Open: %v", got)
	}
	if _, err := o.Load(ctx, "tiny", nil); err != nil {
		t.Fatal(err)
	}
	if got := loadedNames(o); !sameNames(got, "stories260K", "tiny") {
		t.Fatalf("after loading tiny: %v", got)
	}
	// dup needs room: the least recently used idle one (stories, loaded first) goes
	if _, err := o.Load(ctx, "dup", nil); err != nil {
		t.Fatal(err)
	}
	if got := loadedNames(o); !sameNames(got, "tiny", "dup") {
		t.Fatalf("after loading dup: %v", got)
	}
	// both loaded ones in use: stories cannot load, and neither is unloaded
	doneTiny, err := o.p.Use(ctx, "tiny", nil)
	if err != nil {
		t.Fatal(err)
	}
	doneDup, err := o.p.Use(ctx, "dup", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Load(ctx, "", nil); !errors.Is(err, ErrBusy) {
		t.Fatalf("load with every loaded model busy: %v, want ErrBusy", err)
	}
	if got := loadedNames(o); !sameNames(got, "tiny", "dup") {
		t.Fatalf("after a refused load: %v", got)
	}
	doneTiny()
	// tiny is idle now: stories loads in its place; dup (busy) stays
	res := generate(t, o, Request{Prompt: "Once upon a time", NumPredict: 4})
	if res.Usage.LoadDuration <= 0 {
		t.Fatalf("load_duration %v for a request that loaded its model", res.Usage.LoadDuration)
	}
	if got := loadedNames(o); !sameNames(got, "stories260K", "dup") {
		t.Fatalf("after a request of the primary: %v", got)
	}
	doneDup()
	if _, err := o.Load(ctx, "nosuch", nil); !errors.Is(err, ErrModelNotFound) {
		t.Fatalf("unknown model: %v", err)
	}
}

// TestModelOverBudget: a model larger than ModelBytes by itself loads
// alone (the idle others unloaded), as Ollama's scheduler does, and the
// primary can always come back; a file that cannot load fails before any
// idle model is unloaded for it.
func TestModelOverBudget(t *testing.T) {
	vocab := filepath.Join(t.TempDir(), "vocab.gguf")
	b, err := os.ReadFile(testmodels.Path(t, "ggml-vocab-gpt-2.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(vocab, b, 0o644); err != nil {
		t.Fatal(err)
	}
	opts := testOptions(t, t.TempDir())
	opts.Models = []ModelSpec{{Name: "tiny", Path: testmodels.Path(t, "llama-2-tiny-random.gguf")}, {Name: "vocab", Path: vocab}}
	opts.ModelBytes = 1 // smaller than any model
	o := openOS(t, opts)
	ctx := context.Background()
	if _, err := o.Load(ctx, "tiny", nil); err != nil {
		t.Fatal(err)
	}
	if got := loadedNames(o); !sameNames(got, "tiny") {
		t.Fatalf("after loading tiny over the budget: %v", got)
	}
	if _, err := o.Load(ctx, "vocab", nil); err == nil || errors.Is(err, ErrBusy) {
		t.Fatalf("loading a vocab-only file: %v", err)
	}
	if got := loadedNames(o); !sameNames(got, "tiny") {
		t.Fatalf("a failed load unloaded %v", got)
	}
	if res := generate(t, o, Request{Prompt: "Once upon a time", NumPredict: 4}); res.Usage.EvalTokens == 0 {
		t.Fatal("the primary did not come back")
	}
	if got := loadedNames(o); !sameNames(got, "stories260K") {
		t.Fatalf("after the primary's request: %v", got)
	}
}

// TestUnloadWaitsForRequests: Unload of a model in use unloads it when
// its last request ends; requests racing loads and unloads all answer the
// same greedy text (run under -race).
func TestUnloadWaitsForRequests(t *testing.T) {
	opts := testOptions(t, t.TempDir())
	opts.Models = []ModelSpec{{Name: "tiny", Path: testmodels.Path(t, "llama-2-tiny-random.gguf")}}
	opts.MaxModels = 1
	o := openOS(t, opts)
	ctx := context.Background()
	want := map[string]string{}
	for _, name := range []string{"", "tiny"} {
		want[name] = generate(t, o, Request{Model: name, Prompt: "Once upon a time", NumPredict: 6}).Text
	}
	done, err := o.p.Use(ctx, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Unload(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if got := loadedNames(o); !sameNames(got, "stories260K") {
		t.Fatalf("unloaded while in use: %v", got)
	}
	done()
	if got := loadedNames(o); len(got) != 0 {
		t.Fatalf("still loaded after its last request: %v", got)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	zero := time.Duration(0)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := []string{"", "tiny"}[i%2]
			req := Request{Model: name, Prompt: "Once upon a time", NumPredict: 6}
			if i%4 == 0 {
				req.KeepAlive = &zero
			}
			for {
				res, err := o.Generate(ctx, req)
				if errors.Is(err, ErrBusy) { // the other model holds the one place
					time.Sleep(time.Millisecond)
					continue
				}
				if err == nil && res.Text != want[name] {
					err = errors.New("model " + name + " answered " + res.Text + ", want " + want[name])
				}
				errs <- err
				return
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestUnloadKeepsTiers: unloading the primary detaches the tier scheduler
// and drops the resident level; its packs stay stored, and the next load
// brings the resident pack back, answering as before.
func TestUnloadKeepsTiers(t *testing.T) {
	opts := testOptions(t, t.TempDir())
	opts.ResidentSeqs = 1
	o := openOS(t, opts)
	ctx := context.Background()
	addMemories(t, o, "c", "Lily has a red ball.", "Max likes the park.")
	if _, err := o.Warm(ctx, "c", WarmOptions{Resident: true}); err != nil {
		t.Fatal(err)
	}
	turn := Request{Cube: "c", Messages: []Message{{Role: "user", Content: "What does Lily have?"}}, NumPredict: 12, NoPersist: true}
	before, err := o.Chat(ctx, turn)
	if err != nil {
		t.Fatal(err)
	}
	if before.CacheSource != SourceResident {
		t.Fatalf("source %q before the unload, want resident", before.CacheSource)
	}
	packs, err := o.Packs(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Unload(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if o.Engine() != nil {
		t.Fatal("engine still there after the unload")
	}
	after, err := o.Packs(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	if after.Resident != nil || len(after.Packs) != len(packs.Packs) {
		t.Fatalf("unloaded: resident %+v, %d packs (want none resident, %d stored)", after.Resident, len(after.Packs), len(packs.Packs))
	}
	if _, err := o.p.Scheduler().Tick(ctx); !errors.Is(err, scheduler.ErrReadOnly) {
		t.Fatalf("tier tick with the model unloaded: %v, want ErrReadOnly", err)
	}
	// a tick loads the model (as a request would) and the resident pack is back
	if _, err := o.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := o.Packs(ctx, "c"); st.Resident == nil {
		t.Fatal("resident pack not back after the reload")
	}
	res, err := o.Chat(ctx, turn)
	if err != nil {
		t.Fatal(err)
	}
	if res.CacheSource != SourceResident || res.Text != before.Text {
		t.Fatalf("after the reload: %q from %q, want %q from resident", res.Text, res.CacheSource, before.Text)
	}
}
