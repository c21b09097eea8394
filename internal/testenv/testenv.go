package testenv

import (
	"context"
	"strings"
	"testing"

	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/runtime/llama"
	"github.com/memosrt/memosrt/textmem"
)

// DB opens the store of a data directory in dir (NoSync), closed at the
// end of the test; a failed Close fails the test.
func DB(t testing.TB, dir string) *datadir.DB {
	t.Helper()
	db, err := datadir.Open(datadir.Options{Dir: dir, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	})
	return db
}

// Engine loads the stories260K model with o (zero fields: 2 threads, 512
// cells, 2 sequences), closed at the end of the test.
func Engine(t testing.TB, o runtime.Options) *runtime.Engine {
	t.Helper()
	o.ModelPath = testmodels.Stories(t)
	if o.Threads == 0 {
		o.Threads = 2
	}
	if o.NCtx == 0 {
		o.NCtx = 512
	}
	if o.NSeqMax == 0 {
		o.NSeqMax = 2
	}
	e, err := runtime.Load(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// Env is an engine on stories260K (1,024 cells, one sequence, one thread)
// and a text tier in a fresh data directory.
type Env struct {
	Eng *runtime.Engine
	DB  *datadir.DB
	Mem *textmem.Store
}

// NewEnv opens an Env, closed at the end of the test.
func NewEnv(t testing.TB) *Env {
	t.Helper()
	eng := Engine(t, runtime.Options{NCtx: 1024, Threads: 1, NSeqMax: 1})
	db := DB(t, t.TempDir())
	mem, err := textmem.Open(db, textmem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	return &Env{Eng: eng, DB: db, Mem: mem}
}

// Add stores texts as memories of cube and returns them.
func (e *Env) Add(t testing.TB, cube string, texts ...string) []textmem.Memory {
	t.Helper()
	var out []textmem.Memory
	for _, s := range texts {
		m, err := e.Mem.Add(context.Background(), cube, textmem.Memory{Text: s})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// AVX512 reports whether ggml's CPU backend in this build runs AVX-512
// kernels (llama_print_system_info's "AVX512 = 1"). Exact counts that come
// out of float sums (calibration tables: top-1 agreement of a lossy codec
// over 372 positions) differ by a position or two between the AVX-512 and
// the AVX2 kernels; tests that assert such counts give both.
func AVX512() bool {
	return strings.Contains(llama.SystemInfo(), "AVX512 = 1")
}

// SkipUnderRace skips a test in a -race build (make race): for a test
// that checks numbers (a calibration table, output equality over long
// prefills) with no concurrency of its own, which the race detector slows
// several times over and which `make test` runs. why says what it checks.
func SkipUnderRace(t testing.TB, why string) {
	t.Helper()
	if Race {
		t.Skipf("under -race: %s (no concurrency to check; make test runs it)", why)
	}
}
