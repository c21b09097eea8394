package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/memosrt/memosrt/embed"
	"github.com/memosrt/memosrt/lora"
	"github.com/memosrt/memosrt/scheduler"
	"github.com/memosrt/memosrt/server"
)

const serveUsage = "serve --db DIR --model PATH [--addr 127.0.0.1:11435] [--parallel N] [--resident N] [--ctx N] [--token T] [--insecure] [--chat-template T]\n" +
	"        [--backend llama|ollama --ollama-host URL --ollama-model NAME] [--embed model|hash[:DIM]|ollama:MODEL]"

func cmdServe(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	sf := addStoreFlags(fs)
	addr := fs.String("addr", "127.0.0.1:11435", "listen address (host:port)")
	parallel := fs.Int("parallel", 4, "requests generating at once (sequences)")
	resident := fs.Int("resident", 0, "sequences reserved for resident packs (POST /v1/cubes/{cube}/pack {\"resident\":true})")
	token := fs.String("token", "", "require this bearer token on every request")
	insecure := fs.Bool("insecure", false, "allow a non-loopback --addr without --token")
	name := fs.String("name", "", "model name clients use (default: the GGUF file name without .gguf)")
	maxQueue := fs.Int("max-queue", 64, "requests that may wait for a slot before 429")
	numPredict := fs.Int("num-predict", 0, "default cap on generated tokens when a request sets none (0: until n_ctx)")
	noPersist := fs.Bool("no-persist", false, "do not save conversation KV states as packs")
	minPersist := fs.Int("min-persist-tokens", 128, "shortest conversation state saved as a pack, tokens")
	backend := fs.String("backend", "llama", "llama (in-process) or ollama (text-only fallback)")
	ollamaHost := fs.String("ollama-host", "http://127.0.0.1:11434", "Ollama server URL (--backend ollama, --embed ollama:MODEL)")
	ollamaModel := fs.String("ollama-model", "", "upstream model (--backend ollama)")
	embedFlag := fs.String("embed", "model", "embeddings for /api/embed and /v1/embeddings: model (the loaded model, mean-pooled), hash[:DIM] or ollama:MODEL")
	chatTemplate := fs.String("chat-template", "", "chat template (text or llama.cpp built-in name such as chatml); default: the model's")
	ef := addEngineFlags(fs)
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if err := checkListen(*addr, *token, *insecure); err != nil {
		return err
	}
	emb, err := embedderFromFlag(ctx, *embedFlag, *ollamaHost)
	if err != nil {
		return err
	}
	st, err := sf.open()
	if err != nil {
		return err
	}
	defer st.Close()
	kv := st.kv
	log := logger()
	// tier state (heat, transitions) is served read-only; ticks that move
	// memories between tiers run from `memosrt tiers --tick`
	tiers, err := scheduler.NewTiers(st.db, scheduler.ViewRunner(st.mem, kv), scheduler.TierOptions{Logger: log})
	if err != nil {
		return err
	}
	defer tiers.Close()
	srv, err := server.New(server.Options{DB: st.db, Store: st.mem, KV: kv, Tiers: tiers, Embedder: emb, Token: *token, Version: version,
		MaxQueue: *maxQueue, NoPersist: *noPersist, MinPersistTokens: *minPersist, DefaultNumPredict: *numPredict, Logger: log})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(ln) }()
	fmt.Fprintf(os.Stderr, "memosrt: listening on http://%s (%s backend loading)\n", ln.Addr(), *backend)

	var closeEngine func() error
	switch *backend {
	case "llama":
		if *ef.model == "" {
			hs.Close()
			return errors.New("--model is required (or set MEMOSRT_MODEL)")
		}
		reg, err := lora.NewRegistry(st.db, lora.RegistryOptions{Logger: log})
		if err != nil {
			hs.Close()
			return err
		}
		// Adapters are registered with `memosrt lora add` while the server
		// is stopped, so an empty registry means no request can name one:
		// the engine then keeps llama.cpp's graph reuse (runtime.Options.LoRA).
		if ef.lora, err = hasAdapters(ctx, reg, "*"); err != nil {
			hs.Close()
			return err
		}
		eng, err := ef.load(ctx, *parallel+*resident)
		if err != nil {
			hs.Close()
			return err
		}
		man, err := lora.NewManager(eng.Model(), *ef.model, reg, lora.Options{Detach: eng.DetachAdapter, Logger: log})
		if err != nil {
			hs.Close()
			eng.Close()
			return err
		}
		closeEngine = func() error { return errors.Join(man.Close(), eng.Close()) }
		n := *name
		if n == "" {
			n = strings.TrimSuffix(filepath.Base(*ef.model), ".gguf")
		}
		if err := srv.UseEngine(eng, server.EngineOptions{Name: n, Parallel: *parallel, ResidentPacks: *resident, ModelPath: *ef.model,
			ChatTemplate: *chatTemplate, Adapters: man}); err != nil {
			hs.Close()
			closeEngine()
			return err
		}
	case "ollama":
		if err := srv.UseOllama(server.OllamaOptions{URL: *ollamaHost, Model: *ollamaModel, Name: *name, Parallel: *parallel}); err != nil {
			hs.Close()
			return err
		}
	default:
		hs.Close()
		return fmt.Errorf("--backend %q: want llama or ollama", *backend)
	}
	fmt.Fprintf(os.Stderr, "memosrt: ready on http://%s\n", ln.Addr())
	select {
	case err = <-serveErr:
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = errors.Join(ignoreClosed(err), hs.Shutdown(sctx), srv.Shutdown(sctx))
	if closeEngine != nil {
		err = errors.Join(err, closeEngine())
	}
	return err
}

func ignoreClosed(err error) error {
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// checkListen refuses a non-loopback address without a token unless
// insecure is set.
func checkListen(addr, token string, insecure bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--addr %q: %w", addr, err)
	}
	loop := host == "localhost"
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		loop = true
	}
	if !loop && token == "" && !insecure {
		return fmt.Errorf("--addr %s is not a loopback address: set --token (clients send Authorization: Bearer TOKEN) or pass --insecure", addr)
	}
	return nil
}

func embedderFromFlag(ctx context.Context, v, ollamaHost string) (embed.Embedder, error) {
	switch {
	case v == "" || v == "model" || v == "none":
		return nil, nil // the llama backend embeds with its loaded model
	case v == "hash" || strings.HasPrefix(v, "hash:"):
		dim := 768
		if d, ok := strings.CutPrefix(v, "hash:"); ok {
			n, err := strconv.Atoi(d)
			if err != nil {
				return nil, fmt.Errorf("--embed %q: bad dimension", v)
			}
			dim = n
		}
		return embed.NewHash(dim)
	case strings.HasPrefix(v, "ollama:"):
		return embed.NewOllama(ctx, embed.OllamaOptions{URL: ollamaHost, Model: strings.TrimPrefix(v, "ollama:")})
	}
	return nil, fmt.Errorf("--embed %q: want model, hash[:DIM] or ollama:MODEL", v)
}
