package lint

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/memosrt/memosrt"

// layers is the allowed import order of the module's packages, bottom
// first: a package's non-test files may import only packages of a lower
// layer (never one of its own layer or above). README's "Layout" section
// draws the same map. A new package must be placed here before it builds
// into a passing test run.
var layers = [][]string{
	// the error kinds every package's sentinels carry
	{"errkind"},
	// leaves: no package of ours but errkind
	{"internal/defaults", "internal/gate", "internal/atomicfile", "internal/half", "internal/safepath", "internal/sealed", "internal/stats",
		// the heat score of package scheduler; the CLI's conventions
		"scheduler/heat", "internal/cli",
		"runtime/grammar", "embed", "datadir",
		// test helpers: imported by _test.go files only (checked below)
		"internal/testutil", "internal/testmodels", "internal/testfs", "internal/lint"},
	// the llama.cpp binding (the one cgo package)
	{"runtime/llama"},
	// embedding with a GGUF model: the chat model's (runtime.Engine.Embed)
	// or an embedding model of its own
	{"runtime/embedding"},
	// inference: engine, sequences, KV admission
	{"runtime", "runtime/slots"},
	// the text and activation tiers
	{"textmem", "kvcache"},
	// tiers that build on the text tier; optional store backends; tool calling
	{"accesskey", "toolcall", "layout", "lora", "convmem", "cubearchive", "datacheck", "embed/llamaembed", "textmem/postgres", "kvcache/redis", "internal/ollamastore",
		// the calibration gate of composition and lossy packs
		"kvgate"},
	// promotion and demotion between tiers; which models are loaded; what
	// conversations write (recording, governed writes, extraction jobs);
	// the upstream servers a text-only OS generates through
	{"scheduler", "modelsched", "conversation", "upstream", "memchunk"},
	// what an OS is opened with, read by every layer above; what a
	// request asks and answers; what the pipeline reports; the names and
	// budget of conversation packs
	{"config", "pipeline/request", "pipeline/status", "pipeline/convpack"},
	// the request pipeline: the served models, the request stages, the
	// conversation packs, the resident level; what an answer leaves in the
	// conversation memory
	{"pipeline", "pipeline/record"},
	// what touches every tier of a cube: delete, resync, export, import
	{"cubeops"},
	// the facade an app embeds
	{""},
	// what every HTTP surface of the server shares (body decoding, the
	// error status table, streaming); server/... packages import each
	// other only downward, as every package does
	{"server/wire"},
	// the surfaces package server mounts
	{"server/mcp", "server/memory", "server/ui"},
	// wire translation; benchmarks over the facade
	{"server", "internal/testenv", "bench", "bench/gguf", "bench/recall", "bench/crash", "bench/soak"},
	// the client of a running serve (the CLI's commands on its directory)
	{"internal/serveclient"},
	// the command
	{"cmd/memosrt"},
}

// testOnly are packages no non-test file may import (but another of
// them: they are tests' helpers too).
var testOnly = []string{"internal/testutil", "internal/testmodels", "internal/testfs", "internal/testenv", "internal/lint"}

// hooks are the documented ways a lower package calls up: function-typed
// fields of exported structs in packages below the root package. Each is
// set by a higher layer and called by the lower one; any other such field
// fails TestLayers, so a new callback is a decision written down here
// (with what it is for) and in the field's doc comment.
var hooks = map[string]string{
	"runtime.Request.OnText":               "streams generated text to the caller",
	"runtime.Options.Progress":             "reports model-load progress",
	"runtime/llama.ModelParams.Progress":   "reports model-load progress",
	"runtime/llama.TrainOptions.Train":     "per-step training callback (loss, stop)",
	"textmem.Options.Now":                  "clock (tests)",
	"config.Options.ComposeRatio":          "the per-model recompute fraction a calibration decided",
	"textmem.Options.NewVectorIndex":       "dense index constructor chosen by the app",
	"textmem.Options.OnDelete":             "tells the tiers above a memory is gone (drop its packs)",
	"textmem.Options.OnCubeDeleted":        "tells the tiers above a cube is gone",
	"textmem.Options.OnResync":             "tells the tiers above a cube's index was reloaded from the shared store",
	"kvcache.Options.Now":                  "clock (tests)",
	"kvcache.WarmOptions.Compose":          "a KV source after a pack's restore: composes members from their chunks (set through scheduler.TierOptions.Compose)",
	"lora.DistillOptions.Pause":            "lets foreground requests pre-empt distillation",
	"lora.DistillOptions.Weights":          "per-example training weights",
	"lora.Options.Detach":                  "asks the engine to drop an adapter before it is freed",
	"lora.Options.Now":                     "clock (tests)",
	"lora.RegistryOptions.Now":             "clock (tests)",
	"convmem.Options.Now":                  "clock (tests)",
	"conversation.Hooks.AddMemory":         "the facade's write path for a new memory (the cube's record first)",
	"conversation.Hooks.Generate":          "generates an extraction's output with the served model, at background priority",
	"conversation.Hooks.ContextTokens":     "the loaded model's context length, which sizes extraction chunks",
	"conversation.Hooks.Used":              "counts a consolidated profile's memories as used, for promotion",
	"conversation.Hooks.Rate":              "moves the heat of an answer's memories by feedback's rating",
	"conversation.Hooks.Kick":              "asks the scheduler for a tick (a changed memory's pack is recomputed)",
	"conversation.Hooks.Go":                "runs background turn writes as the facade's in-flight work, which Close waits for",
	"conversation.Hooks.JobStarted":        "failpoint when a job is marked running (restart tests)",
	"scheduler.ParametricOptions.OnChange": "tells the facade the adapter set changed",
	"scheduler.TierOptions.Reserve":        "asks the facade for a free sequence for a tier job",
	"scheduler.TierOptions.AfterPut":       "failpoint between a job's store and commit (crash tests)",
	"scheduler.TierOptions.Adapters":       "asks the facade for the adapter set a job runs under",
	"scheduler.TierOptions.Compose":        "asks the pipeline to compose a rebuilt pack's members from their chunks where the calibration gate allows it",
	"scheduler.AdapterSet.Release":         "returns the adapter set taken by Adapters",
	"modelsched.Options.Check":             "refuses a model file before idle models are unloaded for it",
	"modelsched.Options.Load":              "loads a model: the facade's engine, slots and adapters",
	"modelsched.Options.Unload":            "saves and frees a loaded model",
	"modelsched.Options.Loaded":            "attaches the tier scheduler to a loaded primary",
	"upstream.Request.OnText":              "streams the upstream's text to the caller",
	"pipeline.Deps.OnChat":                 "records an answered chat turn (the facade's conversations)",
	"pipeline.Deps.OnResponse":             "keeps an answer in its cube's response log (for feedback)",
	"pipeline/request.Request.OnText":      "streams generated text to the caller",
	"cubeops.Stores.Now":                   "clock (the facade's)",
	"cubeops.Stores.AfterTextDelete":       "failpoint between a cube's text delete and the rest (tests)",
}

// pkgFiles is one package directory's non-test Go files, parsed.
type pkgFiles struct {
	rel   string // "" for the root package
	files map[string]*ast.File
}

func walkPackages(t *testing.T) []pkgFiles {
	t.Helper()
	root, _ := filepath.Abs(filepath.Join("..", ".."))
	var out []pkgFiles
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if !d.IsDir() {
			return nil
		}
		if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || rel == "third_party" || rel == "bin" || rel == "docs" || rel == "examples" || rel == "models" || rel == "lib") {
			return filepath.SkipDir
		}
		fset := token.NewFileSet()
		pkgs, err := parser.ParseDir(fset, path, func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, parser.ParseComments)
		if err != nil {
			return err
		}
		if rel == "." {
			rel = ""
		}
		for _, p := range pkgs {
			if p.Name == "main" && rel != "cmd/memosrt" {
				continue // tools under a package's directory (go:build ignore)
			}
			out = append(out, pkgFiles{rel: rel, files: p.Files})
		}
		// a directory holding only test files is a package too
		if len(pkgs) == 0 {
			if ms, _ := filepath.Glob(filepath.Join(path, "*_test.go")); len(ms) > 0 {
				out = append(out, pkgFiles{rel: rel})
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 20 {
		t.Fatalf("found only %d packages under %s", len(out), root)
	}
	return out
}

func layerOf(rel string) int {
	for i, l := range layers {
		if slices.Contains(l, rel) {
			return i
		}
	}
	return -1
}

func name(rel string) string {
	if rel == "" {
		return "memosrt (root)"
	}
	return rel
}

// TestLayers: imports point down the layers, test helpers stay in tests,
// and a lower package calls up only through the documented hooks.
func TestLayers(t *testing.T) {
	for _, v := range layerViolations(walkPackages(t)) {
		t.Error(v)
	}
}

// layerViolations returns one line per broken rule.
func layerViolations(pkgs []pkgFiles) []string {
	var bad []string
	seen := map[string]bool{}
	for _, p := range pkgs {
		seen[p.rel] = true
		from := layerOf(p.rel)
		if from < 0 {
			bad = append(bad, fmt.Sprintf("package %s is in no layer: place it in internal/lint's layers table", name(p.rel)))
			continue
		}
		names := make([]string, 0, len(p.files))
		for fn := range p.files {
			names = append(names, fn)
		}
		sort.Strings(names)
		for _, fn := range names {
			f := p.files[fn]
			for _, imp := range f.Imports {
				path := strings.Trim(imp.Path.Value, `"`)
				if path != module && !strings.HasPrefix(path, module+"/") {
					continue
				}
				to := strings.TrimPrefix(strings.TrimPrefix(path, module), "/")
				if slices.Contains(testOnly, to) && !slices.Contains(testOnly, p.rel) { // a test helper may use another
					bad = append(bad, fmt.Sprintf("%s imports %s, a test helper, outside a _test.go file", filepath.Base(fn), to))
					continue
				}
				if l := layerOf(to); l < 0 || l >= from {
					bad = append(bad, fmt.Sprintf("%s (package %s, layer %d) imports %s (layer %d): imports point down the layers", filepath.Base(fn), name(p.rel), from, name(to), l))
				}
			}
			if from < layerOf("") {
				bad = append(bad, undocumentedHooks(p.rel, f)...)
			}
		}
	}
	for _, l := range layers {
		for _, rel := range l {
			if !seen[rel] {
				bad = append(bad, fmt.Sprintf("layers names %s, which is no package: remove it", name(rel)))
			}
		}
	}
	return bad
}

// undocumentedHooks returns the function-typed fields of f's exported
// structs that are not in hooks or lack a doc comment.
func undocumentedHooks(rel string, f *ast.File) []string {
	var bad []string
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || !ts.Name.IsExported() {
			return true
		}
		st, ok := ts.Type.(*ast.StructType)
		if !ok {
			return true
		}
		for _, fld := range st.Fields.List {
			if _, ok := fld.Type.(*ast.FuncType); !ok {
				continue
			}
			for _, nm := range fld.Names {
				if !nm.IsExported() {
					continue
				}
				key := rel + "." + ts.Name.Name + "." + nm.Name
				if _, ok := hooks[key]; !ok {
					bad = append(bad, fmt.Sprintf("%s is a callback up from package %s that is not a documented hook: add it to internal/lint's hooks, or call down instead", key, rel))
				} else if fld.Doc == nil || strings.TrimSpace(fld.Doc.Text()) == "" {
					bad = append(bad, fmt.Sprintf("hook %s has no doc comment", key))
				}
			}
		}
		return true
	})
	return bad
}

// violationsWith returns layerViolations over the module's packages with
// package rel's non-test files replaced by one file, name, of source src.
func violationsWith(t *testing.T, rel, name, src string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	pkgs := walkPackages(t)
	for i := range pkgs {
		if pkgs[i].rel == rel {
			pkgs[i].files = map[string]*ast.File{name: f}
		}
	}
	return layerViolations(pkgs)
}

// TestLayersCatchViolations: the check fails on an import up the layers,
// on a test helper in a non-test file, and on an undocumented callback.
func TestLayersCatchViolations(t *testing.T) {
	src := `package textmem

import (
	"github.com/memosrt/memosrt/scheduler"
	"github.com/memosrt/memosrt/internal/testutil"
)

type Options struct {
	// OnSomething is new.
	OnSomething func()
}

var _ = scheduler.Job{}
var _ = testutil.WaitFor
`
	got := violationsWith(t, "textmem", "bad.go", src)
	want := []string{
		"bad.go (package textmem, layer 5) imports scheduler (layer 7): imports point down the layers",
		"bad.go imports internal/testutil, a test helper, outside a _test.go file",
		"textmem.Options.OnSomething is a callback up from package textmem that is not a documented hook: add it to internal/lint's hooks, or call down instead",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestLayersServerDownward: server/... packages import each other only
// downward: server mounts server/mcp, and server/mcp imports neither
// server nor a surface beside it (server/memory), only server/wire.
func TestLayersServerDownward(t *testing.T) {
	src := `package mcp

import (
	"github.com/memosrt/memosrt/server"
	"github.com/memosrt/memosrt/server/memory"
	"github.com/memosrt/memosrt/server/wire"
)

var _ = server.New
var _ = memory.New
var _ = wire.Status
`
	got := violationsWith(t, "server/mcp", "up.go", src)
	mcp, srv := layerOf("server/mcp"), layerOf("server")
	want := []string{
		fmt.Sprintf("up.go (package server/mcp, layer %d) imports server (layer %d): imports point down the layers", mcp, srv),
		fmt.Sprintf("up.go (package server/mcp, layer %d) imports server/memory (layer %d): imports point down the layers", mcp, mcp),
	}
	if !slices.Equal(got, want) {
		t.Fatalf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if w := layerOf("server/wire"); w <= layerOf("") || w >= mcp || srv <= mcp {
		t.Fatalf("layers: root %d, server/wire %d, server/mcp %d, server %d: want root < wire < surfaces < server", layerOf(""), w, mcp, srv)
	}
}

// TestDocGo: every package has a doc.go holding its package comment.
func TestDocGo(t *testing.T) {
	for _, p := range walkPackages(t) {
		if len(p.files) == 0 {
			continue // test files only
		}
		dir := filepath.Join("..", "..", filepath.FromSlash(p.rel))
		src, err := os.ReadFile(filepath.Join(dir, "doc.go"))
		if err != nil {
			t.Errorf("package %s has no doc.go", name(p.rel))
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), "doc.go", src, parser.ParseComments|parser.PackageClauseOnly)
		if err != nil {
			t.Fatal(err)
		}
		if f.Doc == nil || len(strings.TrimSpace(f.Doc.Text())) < 40 {
			t.Errorf("%s/doc.go has no package comment saying what the package is", name(p.rel))
		}
	}
}
