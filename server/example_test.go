package server_test

import (
	"context"
	"net/http"

	"github.com/memosrt/memosrt/badger"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/server"
	"github.com/memosrt/memosrt/textmem"
)

// A server over a data directory and an in-process model: it listens at
// once (inference answers 503 until the model is attached), then serves the
// Ollama, OpenAI and memory APIs.
func Example() {
	ctx := context.Background()
	db, _ := badger.Open(badger.Options{Dir: "/var/lib/memosrt"})
	defer db.Close()
	mem, _ := textmem.Open(db, textmem.Options{})
	defer mem.Close()
	kv, _ := kvcache.Open(db, kvcache.Options{})
	defer kv.Close()
	srv, err := server.New(server.Options{DB: db, Store: mem, KV: kv})
	if err != nil {
		return
	}
	hs := &http.Server{Addr: "127.0.0.1:11435", Handler: srv}
	go hs.ListenAndServe()
	eng, err := runtime.Load(ctx, runtime.Options{ModelPath: "model.gguf", NSeqMax: 5})
	if err != nil {
		return
	}
	defer eng.Close()
	// 4 request slots, 1 sequence for a resident pack
	srv.UseEngine(eng, server.EngineOptions{Name: "model", Parallel: 4, ResidentPacks: 1})
	// ... on exit: stop HTTP, then drain requests and pack writes
	hs.Shutdown(ctx)
	srv.Shutdown(ctx)
}
