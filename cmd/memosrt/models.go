package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/config"
	"github.com/memosrt/memosrt/internal/cli"
	"github.com/memosrt/memosrt/internal/ollamastore"
	"github.com/memosrt/memosrt/runtime"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// modelsFlags are serve's flags for the models besides --model.
type modelsFlags struct {
	dir       *string
	noStore   *bool
	keepAlive *string
	maxModels *int
	budget    *int64
	keep      time.Duration // parsed keepAlive (check)
}

func addModelsFlags(fs *pflag.FlagSet) modelsFlags {
	return modelsFlags{
		dir:       fs.String("models-dir", "", "also serve every GGUF file in `DIR` (named by its file name without .gguf), loaded on first use"),
		noStore:   fs.Bool("no-ollama-store", false, "do not also serve the models of Ollama's store ($OLLAMA_MODELS, default ~/.ollama/models)"),
		keepAlive: fs.String("keep-alive", "5m", "how long (`DURATION`, or seconds) a model stays loaded after its last request when the request names no keep_alive; negative: forever, 0: unloaded after each request; $OLLAMA_KEEP_ALIVE is the default when set"),
		maxModels: fs.Int("max-models", memosrt.DefaultMaxModels, "models loaded at once (`N`): loading one more unloads the least recently used idle one"),
		budget:    fs.Int64("models-budget", 0, "file `BYTES` of the models loaded at once, as --max-models (0: no bound)"),
	}
}

func (f *modelsFlags) check(cmd *cobra.Command) error {
	v, what := *f.keepAlive, "--keep-alive"
	if env := os.Getenv("OLLAMA_KEEP_ALIVE"); env != "" && !cmd.Flags().Changed("keep-alive") {
		v, what = env, "OLLAMA_KEEP_ALIVE"
	}
	k, err := config.ParseKeepAlive(v)
	if err != nil {
		return fmt.Errorf("%s %q: want a duration (5m, 1h, -1) or seconds", what, v)
	}
	f.keep = k
	return checkFlags(cmd,
		check{"max-models", *f.maxModels >= 1, "1 or more"},
		check{"models-budget", *f.budget >= 0, "0 (no bound) or more bytes"})
}

// apply adds the models of --models-dir and of Ollama's store to o (after
// the primary, which is not listed twice) and sets keep-alive and budgets.
func (f *modelsFlags) apply(o *memosrt.Options) error {
	k := f.keep
	o.KeepAlive, o.MaxModels, o.ModelBytes = &k, *f.maxModels, *f.budget
	// one entry per file (links resolved) and per name
	file := func(p string) string {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		if a, err := filepath.Abs(p); err == nil {
			p = a
		}
		return "path:" + p
	}
	seen := map[string]bool{}
	if o.Model != "" {
		seen[o.PrimaryName()], seen[file(o.Model)] = true, true
	}
	var refused []string
	add := func(name, path string) {
		f := file(path)
		if seen[f] {
			return // the same file under another name: listed once
		}
		if seen[name] {
			refused = append(refused, fmt.Sprintf("%s: the name %s is taken by another model", path, name))
			return
		}
		// a tokenizer fixture or a truncated file is not listed as a model
		if _, err := runtime.CheckModelFile(path); err != nil {
			refused = append(refused, cli.UserMessage(err))
			return
		}
		seen[name], seen[f] = true, true
		o.Models = append(o.Models, memosrt.ModelSpec{Name: name, Path: path})
	}
	if d := *f.dir; d != "" {
		ents, err := os.ReadDir(d)
		if err != nil {
			return fmt.Errorf("--models-dir: %w", err)
		}
		for _, e := range ents {
			if n := e.Name(); !e.IsDir() && strings.HasSuffix(n, ".gguf") {
				add(strings.TrimSuffix(n, ".gguf"), filepath.Join(d, n))
			}
		}
	}
	if !*f.noStore {
		ms, skipped, err := ollamastore.List(ollamaModels())
		if err != nil {
			return err
		}
		for _, m := range ms {
			add(m.Name, m.Path)
		}
		for _, err := range skipped {
			refused = append(refused, cli.UserMessage(err))
		}
	}
	if len(refused) > 0 {
		fmt.Fprintf(os.Stderr, "memosrt: %d files not served as models:\n  %s\n", len(refused), strings.Join(refused, "\n  "))
	}
	return nil
}
