package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/embed"
	"github.com/memosrt/memosrt/scheduler"
	"github.com/memosrt/memosrt/server"
)

const serveUsage = "serve --db DIR --model PATH|NAME[:TAG] [--addr 127.0.0.1:11435] [--parallel N] [--resident N] [--ctx N] [--token T] [--insecure] [--chat-template T]\n" +
	"        [--tick-interval 10s] [--backend llama|ollama --ollama-host URL --ollama-model NAME] [--embed model|hash[:DIM]|ollama:MODEL]"

func cmdServe(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	sf := addStoreFlags(fs)
	addr := fs.String("addr", "127.0.0.1:11435", "listen address (host:port)")
	parallel := fs.Int("parallel", 4, "requests generating at once (sequences)")
	resident := fs.Int("resident", 2, "sequences for resident packs: the hottest cubes' packs kept in the KV cache (0: none)")
	residentCells := fs.Int("resident-cells", 0, "KV cells resident packs may hold together (default n_ctx/4)")
	token := fs.String("token", "", "require this bearer token on every request")
	insecure := fs.Bool("insecure", false, "allow a non-loopback --addr without --token")
	name := fs.String("name", "", "model name clients use (default: the GGUF file name without .gguf, or the Ollama name with its tag for --model NAME[:TAG])")
	maxQueue := fs.Int("max-queue", 64, "requests that may wait for a slot before 429")
	numPredict := fs.Int("num-predict", 0, "default cap on generated tokens when a request sets none (0: until n_ctx)")
	noPersist := fs.Bool("no-persist", false, "do not save conversation KV states as packs")
	minPersist := fs.Int("min-persist-tokens", 128, "shortest conversation state saved as a pack, tokens")
	adapterBudget := fs.Int64("adapter-budget", 1<<30, "tensor bytes of the LoRA adapters loaded at once: the least recently used unattached one is evicted beyond it")
	convBudget := fs.Int64("conv-budget", 1<<30, "stored conversation packs of all cubes, bytes: the oldest are deleted beyond it")
	tickEvery := fs.Duration("tick-interval", 10*time.Second, "period of the tier scheduler's ticks (heat, promotions, demotions, resident packs)")
	kvBudget := fs.Int64("kv-budget", 0, "bytes of KV state all packs of the activation tier may hold (default 256 MiB)")
	gcEvery := fs.Duration("gc-interval", 5*time.Minute, "period of the value-log GC (deleted packs' space is also reclaimed at every start)")
	shutdownTimeout := fs.Duration("shutdown-timeout", 10*time.Second, "on SIGTERM/SIGINT: how long running requests may finish before they are cancelled")
	debugClock := fs.Bool("debug-clock", false, "serve POST /v1/debug/clock to move the scheduler's clock (tests)")
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
	opts, err := sf.options()
	if err != nil {
		return err
	}
	if r, ok := runningServer(*sf.db); ok {
		return fmt.Errorf("memosrt serve is already running on %s (%s)", *sf.db, r.info.URL)
	}
	opts.NoScheduler = false
	opts.Parallel, opts.ResidentSeqs, opts.ResidentCells = *parallel, *resident, *residentCells
	if *resident == 0 {
		opts.ResidentSeqs = -1
	}
	opts.MaxQueue, opts.NoPersist, opts.MinPersistTokens, opts.DefaultNumPredict = *maxQueue, *noPersist, *minPersist, *numPredict
	opts.ConvBytes, opts.AdapterBytes, opts.GCInterval = *convBudget, *adapterBudget, *gcEvery
	opts.ModelName, opts.Embedder, opts.Layout.ChatTemplate = *name, emb, *chatTemplate
	opts.Tiers.Interval, opts.Tiers.KVBytes = *tickEvery, *kvBudget
	var clock *scheduler.OffsetClock
	if *debugClock {
		clock = &scheduler.OffsetClock{}
		opts.Clock = clock
	}
	switch *backend {
	case "llama":
		if err := ef.apply(&opts); err != nil {
			return err
		}
	case "ollama":
		if *ollamaModel == "" {
			return errors.New("--backend ollama needs --ollama-model")
		}
		opts.Upstream = &memosrt.UpstreamOptions{URL: *ollamaHost, Model: *ollamaModel}
	default:
		return fmt.Errorf("--backend %q: want llama or ollama", *backend)
	}
	if os.Getenv("MEMOSRT_FAILPOINT") == "tiers-after-put" {
		// tests: die like a crash once a tier job has stored its pack and
		// before it commits (the next start must finish the job)
		opts.Tiers.AfterPut = func(scheduler.Job) error {
			fmt.Fprintln(os.Stderr, "memosrt: failpoint tiers-after-put: exiting")
			os.Exit(3)
			return nil
		}
	}
	log := logger()
	o, err := memosrt.Open(ctx, opts)
	if err != nil {
		if errors.Is(err, errEncryptionKey) {
			return fmt.Errorf("%w (--encrypt-key-file)", err)
		}
		return err
	}
	defer func() {
		if o != nil {
			o.Close(context.Background())
		}
	}()
	so := server.Options{Token: *token, Version: version, Logger: log}
	if clock != nil {
		so.DebugClock = clock
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	local, unpublish, err := publishServe(*sf.db, ln.Addr().String())
	if err != nil {
		ln.Close()
		return err
	}
	defer unpublish()
	so.LocalToken, so.Instance = local.Token, local.Instance
	srv, err := server.New(o, so)
	if err != nil {
		ln.Close()
		return err
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(ln) }()
	fmt.Fprintf(os.Stderr, "memosrt: ready on http://%s (%s backend, model %s)\n", ln.Addr(), *backend, o.Model().Name)
	select {
	case err = <-serveErr:
		err = ignoreClosed(err)
	case <-ctx.Done():
	}
	// Stop: new requests get 503 (the server refuses them) and queued ones
	// 503 at once (Close drains the queue); running ones may finish until
	// --shutdown-timeout, then are cancelled; conversation packs being
	// written are waited for, then Badger is closed.
	st := o.Stats()
	fmt.Fprintf(os.Stderr, "memosrt: stopping: %d running, %d queued, up to %s for the running to finish\n",
		st.BusySlots, st.Queued, *shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), *shutdownTimeout)
	defer cancel()
	refused := make(chan struct{})
	go func() { srv.Shutdown(sctx); close(refused) }() // returns when its handlers have, or at the timeout
	cerr := o.Close(sctx)                              // cancels what still runs at the timeout
	o = nil
	<-refused
	// handlers have returned: what is left are idle connections
	hctx, hcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer hcancel()
	if herr := hs.Shutdown(hctx); herr != nil {
		hs.Close()
	}
	return errors.Join(err, cerr)
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
