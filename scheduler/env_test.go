package scheduler

import (
	"context"
	"testing"

	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/textmem"
)

// layoutEnv is an engine on the tiny model and a text tier, for the
// scheduler's tests that need a prompt layout.
type layoutEnv struct {
	eng *runtime.Engine
	db  *datadir.DB
	mem *textmem.Store
}

func newLayoutEnv(t *testing.T) *layoutEnv {
	t.Helper()
	eng, err := runtime.Load(context.Background(), runtime.Options{ModelPath: testmodels.Stories(t), NCtx: 1024, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	db, err := datadir.Open(datadir.Options{Dir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	mem, err := textmem.Open(db, textmem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		mem.Close()
		db.Close()
		eng.Close()
	})
	return &layoutEnv{eng: eng, db: db, mem: mem}
}

func (e *layoutEnv) add(t *testing.T, cube string, texts ...string) []textmem.Memory {
	t.Helper()
	var out []textmem.Memory
	for _, s := range texts {
		m, err := e.mem.Add(context.Background(), cube, textmem.Memory{Text: s})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}
