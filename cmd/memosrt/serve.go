package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	neturl "net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/memosrt/memosrt/internal/cli"
	"github.com/memosrt/memosrt/kvcache"
	kvredis "github.com/memosrt/memosrt/kvcache/redis"
	"github.com/memosrt/memosrt/kvgate"
	textpg "github.com/memosrt/memosrt/textmem/postgres"

	"github.com/spf13/cobra"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/embed"
	"github.com/memosrt/memosrt/embed/llamaembed"
	"github.com/memosrt/memosrt/internal/serveclient"
	"github.com/memosrt/memosrt/lora"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/runtime/llama"
	"github.com/memosrt/memosrt/scheduler"
	"github.com/memosrt/memosrt/server"
)

func newServeCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "serve",
		Short: "Serve the Ollama, OpenAI, memory and MCP APIs over HTTP",
		Long: "Serve the Ollama API (/api/chat, /api/generate, ...), the OpenAI API (/v1/chat/completions, ...),\n" +
			"the memory API (/v1/cubes/...), MCP (/mcp) and the playground page (/ui) on --addr, with the tier\n" +
			"scheduler running. CLI commands on the same --db go through the running server.",
		Args: cli.NoArgs,
	}
	fs := c.Flags()
	fs.SortFlags = false
	sf := addStoreFlags(fs)
	addr := fs.String("addr", "127.0.0.1:11435", "listen address `HOST:PORT`")
	parallel := fs.Int("parallel", 4, "requests generating at once (`N` sequences)")
	resident := fs.Int("resident", 2, "sequences for resident packs: the hottest cubes' packs kept in the KV cache (`N`, 0: none)")
	residentCells := fs.Int("resident-cells", 0, "KV `CELLS` resident packs may hold together (default n_ctx/4)")
	token := fs.String("token", "", "require this bearer `TOKEN` on every request")
	insecure := fs.Bool("insecure", false, "allow a non-loopback --addr without --token")
	name := fs.String("name", "", "model `NAME` clients use (default: the GGUF file name without .gguf, or the Ollama name with its tag for --model NAME[:TAG])")
	maxQueue := fs.Int("max-queue", 64, "requests that may wait for a slot before 429 (`N`)")
	numPredict := fs.Int("num-predict", 0, "default cap on generated `TOKENS` when a request sets none (0: until n_ctx)")
	noPersist := fs.Bool("no-persist", false, "do not save conversation KV states as packs")
	minPersist := fs.Int("min-persist-tokens", 128, "shortest conversation state saved as a pack, `TOKENS`")
	adapterBudget := fs.Int64("adapter-budget", 1<<30, "tensor `BYTES` of the LoRA adapters loaded at once: the least recently used unattached one is evicted beyond it")
	convBudget := fs.Int64("conv-budget", 256<<20, "stored conversation packs of all cubes, `BYTES`: the oldest are deleted beyond it")
	ramBudget := fs.Int64("ram-budget", 0, "`BYTES` of decompressed pack states kept in RAM for fast restores, least recently used dropped beyond it (default 128 MiB)")
	tickEvery := fs.Duration("tick-interval", 10*time.Second, "`PERIOD` of the tier scheduler's ticks (heat, promotions, demotions, resident packs)")
	kvBudget := fs.Int64("kv-budget", 0, "`BYTES` of KV state all packs of the activation tier may hold (default 256 MiB)")
	gcEvery := fs.Duration("gc-interval", time.Minute, "`PERIOD` of the value-log GC that gives back the space of deleted and replaced packs while serving (also run when the value log has grown by a file, and at every start)")
	shutdownTimeout := fs.Duration("shutdown-timeout", 10*time.Second, "on SIGTERM/SIGINT: how long (`DURATION`) running requests may finish before they are cancelled")
	bodyTimeout := fs.Duration("body-timeout", time.Minute, "how long (`DURATION`) a client has to send a request body (imports: an hour); a body not in by then is answered 408 and its connection closed")
	parametric := fs.Bool("parametric", false, "distill memories that stay hot into each cube's LoRA adapter, attached to its requests by default (the parametric tier; training takes CPU minutes per cube)")
	distillAfter := fs.Duration("distill-after", 7*24*time.Hour, "with --parametric: how long (`DURATION`) a memory stays hot (from --distill-heat until it falls under the demotion heat 1) before it is distilled")
	distillHeat := fs.Float64("distill-heat", 0, "with --parametric: the `HEAT` at which a memory starts to count as hot (default: the promotion heat, 5)")
	distillThreads := fs.Int("distill-threads", 1, "with --parametric: CPU `THREADS` training uses")
	composeFlag := fs.String("compose", "off", "compose retrieved memories from their KV chunks instead of prefilling them: off, on (recompute 15% of their tokens), auto (the calibration gate picks the fraction per model, or keeps it off; exact until calibrated) or the recompute `FRACTION` (0 to 1]; memories retrieved --chunk-after times get a chunk")
	chunkAfter := fs.Int("chunk-after", 3, "with --compose: how many retrievals (`N`) make a memory's KV chunk")
	pprofAddr := fs.String("pprof-addr", "", "serve Go's profiles (net/http/pprof: /debug/pprof/heap, ...) on this loopback `HOST:PORT`, apart from --addr (default: none)")
	debugClock := fs.Bool("debug-clock", false, "serve POST /v1/debug/clock to move the scheduler's clock (tests)")
	backend := fs.String("backend", "llama", "`BACKEND`: llama (in-process), ollama[:URL] (an Ollama server, default --ollama-host) or openai:URL "+
		"(an OpenAI-compatible server: vLLM, llama-server, LM Studio, SGLang, another memosrt; URL its root or its /v1 base; API key from $"+upstreamKeyEnv+
		" or $OPENAI_API_KEY); the upstream backends are text-only: memories go into the prompt as text")
	upstreamModel := fs.String("upstream-model", "", "the `MODEL` the upstream serves (--backend ollama or openai)")
	ollamaHost := fs.String("ollama-host", "http://127.0.0.1:11434", "Ollama server `URL` (--backend ollama, --embed ollama:MODEL)")
	ollamaModel := fs.String("ollama-model", "", "alias of --upstream-model (`MODEL`)")
	embedModel := fs.String("embed-model", "", "GGUF embedding model file `PATH`, or an Ollama model NAME[:TAG] (nomic-embed-text) in $OLLAMA_MODELS, run in process: every memory gets a vector, search fuses them with BM25, and /api/embed and /v1/embeddings answer with it (default: none)")
	embedFlag := fs.String("embed", "none", "other `EMBEDDER` of memories and of /api/embed and /v1/embeddings: hash[:DIM] or ollama:MODEL (an Ollama server's); none: memories get no vectors, /api/embed embeds with the chat model it names")
	kvStore := fs.String("kv-store", "", "share the activation tier with other nodes through Redis at `URL` (redis://HOST:PORT/DB): packs one node computes restore on every node (default: this node's data directory only)")
	textStore := fs.String("text-store", "", "keep memories and cubes in PostgreSQL at `URL` (postgres://USER:PASS@HOST:PORT/DB), shared with other nodes: a memory added on one is found on every one; local: this node's data directory, also when it was served with a shared store before (default: local)")
	kvCodec := fs.String("kv-codec", "exact", "how cube packs are stored, `CODEC`: exact (byte-identical KV), auto (the smallest lossy codec the calibration gate passes for the model), q8 or q4 (that codec, if the gate passes it); lossy only once the model is calibrated, in the background (memosrt calibrate prints the same table)")
	kvTargets := fs.String("kv-gate-targets", "top1=0.99,greedy=0.90,ceiling=0.40", "the calibration gate's targets (`LIST`: top1, greedy as shares of 1; ceiling, the largest recompute fraction)")
	chatTemplate := fs.String("chat-template", "", "chat `TEMPLATE` (text or llama.cpp built-in name such as chatml); default: the model's")
	ef := addEngineFlags(fs)
	mf := addModelsFlags(fs)
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkFlags(cmd,
			check{"parallel", *parallel >= 0 && *parallel <= 250, "0 (the default, 4) to 250"},
			check{"resident", *resident >= 0 && *resident <= 4, "0 (none) to 4"},
			check{"resident-cells", *residentCells >= 0, "0 (n_ctx/4) or more"},
			check{"max-queue", *maxQueue >= 0, "0 or more"},
			check{"num-predict", *numPredict >= 0, "0 (until n_ctx) or more"},
			check{"min-persist-tokens", *minPersist >= 0, "0 or more"},
			check{"adapter-budget", *adapterBudget >= 0, "0 or more bytes"},
			check{"conv-budget", *convBudget >= 0, "0 or more bytes"},
			check{"kv-budget", *kvBudget >= 0, "0 (256 MiB) or more bytes"},
			check{"ram-budget", *ramBudget >= 0, "0 (128 MiB) or more bytes"},
			check{"tick-interval", *tickEvery >= 0, "a duration of 0 or more"},
			check{"gc-interval", *gcEvery >= 0, "a duration of 0 or more"},
			check{"shutdown-timeout", *shutdownTimeout >= 0, "a duration of 0 or more"},
			check{"body-timeout", *bodyTimeout > 0, "a duration of more than 0"},
			check{"chunk-after", *chunkAfter >= 1, "1 or more"}); err != nil {
			return err
		}
		compose, err := parseCompose(*composeFlag)
		if err != nil {
			return err
		}
		if err := ef.check(cmd); err != nil {
			return err
		}
		if err := mf.check(cmd); err != nil {
			return err
		}
		targets, err := parseTargets(*kvTargets)
		if err != nil {
			return fmt.Errorf("--kv-gate-targets: %w", err)
		}
		if err := (kvgate.GateOptions{Codec: *kvCodec, Targets: targets}).Validate(); err != nil {
			return fmt.Errorf("--kv-codec: %w", err)
		}
		return serve(cmd.Context(), serveFlags{sf: sf, ef: ef, mf: mf, addr: addr, parallel: parallel, resident: resident, residentCells: residentCells,
			token: token, insecure: insecure, name: name, maxQueue: maxQueue, numPredict: numPredict, noPersist: noPersist,
			minPersist: minPersist, adapterBudget: adapterBudget, convBudget: convBudget, ramBudget: ramBudget, tickEvery: tickEvery, kvBudget: kvBudget,
			gcEvery: gcEvery, shutdownTimeout: shutdownTimeout, bodyTimeout: bodyTimeout, debugClock: debugClock, pprofAddr: pprofAddr, backend: backend, ollamaHost: ollamaHost,
			compose: compose, chunkAfter: *chunkAfter,
			ollamaModel: ollamaModel, upstreamModel: upstreamModel, embedFlag: embedFlag, embedModel: embedModel, chatTemplate: chatTemplate, kvStore: kvStore, textStore: textStore,
			kvCodec: *kvCodec, kvTargets: targets,
			param: func() scheduler.ParametricOptions {
				if !*parametric {
					return scheduler.ParametricOptions{}
				}
				return scheduler.ParametricOptions{Enabled: true, For: *distillAfter, HeatAt: *distillHeat,
					Distill: lora.DistillOptions{Threads: *distillThreads}}
			}})
	}
	return c
}

// serveFlags are serve's flags.
type serveFlags struct {
	sf                                                                     storeFlags
	ef                                                                     engineFlags
	mf                                                                     modelsFlags
	addr, token, name, backend, ollamaHost, ollamaModel, embedFlag         *string
	embedModel, chatTemplate, kvStore, textStore, pprofAddr, upstreamModel *string
	parallel, resident, residentCells, maxQueue, numPredict, minPersist    *int
	adapterBudget, convBudget, kvBudget, ramBudget                         *int64
	tickEvery, gcEvery, shutdownTimeout, bodyTimeout                       *time.Duration
	insecure, noPersist, debugClock                                        *bool
	param                                                                  func() scheduler.ParametricOptions
	kvCodec                                                                string
	kvTargets                                                              kvgate.Targets
	compose                                                                float64 // --compose as a fraction (0: off)
	chunkAfter                                                             int
}

// composeAuto is parseCompose's answer for --compose auto.
const composeAuto = -1

// parseCompose reads --compose: off (0), on (runtime's default recompute
// fraction, 0.15), auto (composeAuto) or a fraction in (0, 1].
func parseCompose(v string) (float64, error) {
	switch v {
	case "off", "":
		return 0, nil
	case "auto":
		return composeAuto, nil
	case "on":
		return runtime.DefaultComposeOptions().Ratio, nil
	}
	r, err := strconv.ParseFloat(v, 64)
	if err != nil || !(r > 0 && r <= 1) {
		return 0, fmt.Errorf("--compose %q: want off, on, auto or a recompute fraction in (0, 1]", v)
	}
	return r, nil
}

func serve(ctx context.Context, f serveFlags) error {
	sf, ef := f.sf, f.ef
	addr, parallel, resident, residentCells, token, insecure := f.addr, f.parallel, f.resident, f.residentCells, f.token, f.insecure
	name, maxQueue, numPredict, noPersist, minPersist := f.name, f.maxQueue, f.numPredict, f.noPersist, f.minPersist
	adapterBudget, convBudget, tickEvery, kvBudget, gcEvery := f.adapterBudget, f.convBudget, f.tickEvery, f.kvBudget, f.gcEvery
	shutdownTimeout, debugClock, backend, ollamaHost, ollamaModel := f.shutdownTimeout, f.debugClock, f.backend, f.ollamaHost, f.ollamaModel
	embedFlag, chatTemplate, kvStore, textStore := f.embedFlag, f.chatTemplate, f.kvStore, f.textStore
	if err := checkListen(*addr, *token, *insecure); err != nil {
		return err
	}
	if *f.pprofAddr != "" {
		stop, err := servePprof(*f.pprofAddr)
		if err != nil {
			return err
		}
		defer stop()
	}
	// an address in use fails here, before the data directory is created
	// and the model loaded (it once failed after both); the listener is
	// opened again once the OS is up
	probe, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	probe.Close()
	up, err := upstreamFromFlags(*backend, *ollamaHost, *f.upstreamModel, *ollamaModel, os.Getenv)
	if err != nil {
		return err
	}
	embedHost := *ollamaHost
	if up != nil && up.API == memosrt.UpstreamOllama {
		embedHost = up.URL // --backend ollama:URL
	}
	emb, err := embedderFromFlag(ctx, *embedFlag, embedHost)
	if err != nil {
		return err
	}
	if *f.embedModel != "" {
		if emb != nil {
			return fmt.Errorf("--embed %s and --embed-model %s both choose the embedder: give one", *embedFlag, *f.embedModel)
		}
		l, err := openEmbedModel(ctx, *f.embedModel, ef)
		if err != nil {
			return err
		}
		defer l.Close() // after the OS (deferred below): it embeds until closed
		emb = l
	}
	opts, err := sf.options()
	if err != nil {
		return err
	}
	if r, ok := serveclient.Find(*sf.db); ok {
		return fmt.Errorf("memosrt serve is already running on %s (%s)", *sf.db, r.URL())
	}
	opts.NoScheduler = false
	opts.Parallel, opts.ResidentSeqs, opts.ResidentCells = *parallel, *resident, *residentCells
	if *resident == 0 {
		opts.ResidentSeqs = -1
	}
	opts.MaxQueue, opts.NoPersist, opts.MinPersistTokens, opts.DefaultNumPredict = *maxQueue, *noPersist, *minPersist, *numPredict
	opts.ConvBytes, opts.AdapterBytes, opts.GCInterval, opts.RAMBytes = *convBudget, *adapterBudget, *gcEvery, *f.ramBudget
	opts.KVCodec, opts.KVGate = f.kvCodec, f.kvTargets
	opts.ModelName, opts.Embedder, opts.Layout.ChatTemplate = *name, emb, *chatTemplate
	opts.Tiers.Interval, opts.Tiers.KVBytes = *tickEvery, *kvBudget
	opts.Tiers.Parametric = f.param()
	opts.Compose, opts.ChunkAfterUses = f.compose, f.chunkAfter
	if f.compose == composeAuto {
		opts.Compose, opts.ComposeAuto = 0, true
	}
	var clock *scheduler.OffsetClock
	if *debugClock {
		clock = &scheduler.OffsetClock{}
		opts.Clock = clock
	}
	kind := "llama"
	if up == nil {
		if err := ef.apply(&opts); err != nil {
			return err
		}
		if err := f.mf.apply(&opts); err != nil {
			return err
		}
	} else {
		kind, opts.Upstream = up.API, up
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
	if *kvStore != "" {
		redis.SetLogger(redisLog{log}) // go-redis's own lines (dial failures) at debug: ours say it once
		r, err := kvredis.New(*kvStore, kvredis.Options{})
		if err != nil {
			return fmt.Errorf("--kv-store: %w", err)
		}
		defer r.Close()
		if err := r.Ping(ctx); errors.Is(err, kvcache.ErrSharedRefused) {
			return fmt.Errorf("--kv-store %s: %w", *kvStore, err) // a password or database that can never work
		} else if err != nil {
			// started anyway: chats prefill until the store answers, then
			// the packs stored meanwhile are written to it
			log.Warn("--kv-store not answering; sharing starts when it does", "err", err)
		}
		opts.KVShared = r
	}
	if *textStore == "local" {
		opts.TextStoreLocal = true
	} else if *textStore != "" {
		if !strings.HasPrefix(*textStore, "postgres://") && !strings.HasPrefix(*textStore, "postgresql://") && !strings.Contains(*textStore, "=") {
			return fmt.Errorf("--text-store %q: want a postgres:// URL (or a key=value connection string)", *textStore)
		}
		pg, err := textpg.Open(ctx, *textStore, textpg.Options{Key: memosrt.TextStoreKey(opts.EncryptionKey), Logger: log})
		if err != nil {
			// serve needs the store at start (its tables, the key check);
			// once running it rides out outages
			return fmt.Errorf("--text-store: %w", err)
		}
		defer pg.Close()
		opts.TextStore = pg
	}
	o, err := memosrt.Open(ctx, opts)
	if err != nil {
		if errors.Is(err, errEncryptionKey) {
			return fmt.Errorf("%w (--encrypt-key-file)", err)
		}
		return err
	}
	if up == nil {
		ef.sayCapped(o.Model().NCtx)
	}
	defer func() {
		if o != nil {
			o.Close(context.Background())
		}
	}()
	so := server.Options{Token: *token, Version: version, Logger: log, BodyReadTimeout: *f.bodyTimeout}
	if clock != nil {
		so.DebugClock = clock
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	local, unpublish, err := serveclient.Publish(*sf.db, ln.Addr().String())
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
	more := ""
	if n := len(o.Models()) - 1; n > 0 {
		more = fmt.Sprintf(", %d more listed, loaded on first use", n)
	}
	if emb != nil {
		more += ", embeddings " + emb.Name()
	}
	fmt.Fprintf(os.Stderr, "memosrt: ready on http://%s (%s backend, model %s%s)\n", ln.Addr(), kind, o.Model().Name, more)
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

// servePprof serves net/http/pprof's handlers on addr, a loopback
// address (profiles show memory contents: never on a public one), until
// the returned stop is called.
func servePprof(addr string) (stop func(), err error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof-addr %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("--pprof-addr %s is not a loopback address", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	return func() { hs.Close() }, nil
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

// upstreamKeyEnv holds the API key sent to an openai upstream
// (OPENAI_API_KEY when it is unset).
const upstreamKeyEnv = "MEMOSRT_UPSTREAM_API_KEY"

// upstreamFromFlags reads --backend (llama, ollama, ollama:URL or
// openai:URL), --upstream-model and its alias --ollama-model, and for
// openai the API key from getenv (upstreamKeyEnv, else OPENAI_API_KEY):
// nil for llama.
func upstreamFromFlags(backend, ollamaHost, model, ollamaModel string, getenv func(string) string) (*memosrt.UpstreamOptions, error) {
	kind, url, hasURL := strings.Cut(backend, ":")
	switch {
	case backend == "llama":
		return nil, nil
	case kind == memosrt.UpstreamOllama && !hasURL:
		url = ollamaHost
	case kind == memosrt.UpstreamOllama:
	case kind == memosrt.UpstreamOpenAI && (!hasURL || url == ""):
		return nil, errors.New("--backend openai needs the server's URL: --backend openai:http://HOST:PORT (or its /v1 base)")
	case kind == memosrt.UpstreamOpenAI:
	default:
		return nil, fmt.Errorf("--backend %q: want llama, ollama[:URL] or openai:URL", backend)
	}
	if u, err := neturl.Parse(url); err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("--backend %s: %q is not an http:// or https:// URL", kind, url)
	}
	if model != "" && ollamaModel != "" && model != ollamaModel {
		return nil, fmt.Errorf("--upstream-model %q and its alias --ollama-model %q differ: pass one", model, ollamaModel)
	}
	if model == "" {
		model = ollamaModel
	}
	if model == "" {
		return nil, fmt.Errorf("--backend %s needs --upstream-model MODEL (the name the upstream serves it under)", kind)
	}
	o := &memosrt.UpstreamOptions{API: kind, URL: url, Model: model}
	if kind == memosrt.UpstreamOpenAI {
		o.APIKey = getenv(upstreamKeyEnv)
		if o.APIKey == "" {
			o.APIKey = getenv("OPENAI_API_KEY")
		}
	}
	return o, nil
}

// embedderFromFlag returns the Embedder --embed names: nil for none.
func embedderFromFlag(ctx context.Context, v, ollamaHost string) (embed.Embedder, error) {
	switch {
	case v == "" || v == "none":
		return nil, nil // no vectors; /api/embed embeds with the chat model it names
	case v == "model":
		return nil, errors.New("--embed model is gone (a chat model's mean-pooled states made poor vectors): give --embed-model FILE|NAME, a GGUF embedding model such as nomic-embed-text, for vectors; without it /api/embed and /v1/embeddings still embed with the chat model they name")
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
	return nil, fmt.Errorf("--embed %q: want none, hash[:DIM] or ollama:MODEL (or --embed-model FILE|NAME)", v)
}

// openEmbedModel loads --embed-model: a GGUF file, or an Ollama model name
// found in Ollama's store (as --model), with --threads and --ngl.
func openEmbedModel(ctx context.Context, v string, ef engineFlags) (*llamaembed.Llama, error) {
	path, _, err := resolveModel(v)
	if err != nil {
		return nil, fmt.Errorf("--embed-%w", err) // resolveModel's errors start with "model"
	}
	llama.Init(libDir())
	l, err := llamaembed.Open(ctx, path, llamaembed.Options{Threads: *ef.threads, NGPULayers: llama.GPULayers(*ef.ngl), LibDir: libDir()})
	if err != nil {
		return nil, fmt.Errorf("--embed-model %s: %w", v, err)
	}
	return l, nil
}

// redisLog sends go-redis's log lines to slog at debug level.
type redisLog struct{ l *slog.Logger }

func (r redisLog) Printf(ctx context.Context, format string, v ...any) {
	r.l.DebugContext(ctx, "redis: "+fmt.Sprintf(format, v...))
}
