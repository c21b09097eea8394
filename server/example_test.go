package server_test

import (
	"context"
	"net/http"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/server"
)

// A server over one memory OS: it serves the Ollama, OpenAI and memory APIs
// for the loaded model; the OS runs the tier scheduler behind them.
func Example() {
	ctx := context.Background()
	mos, err := memosrt.Open(ctx, memosrt.Options{Dir: "/var/lib/memosrt", Model: "model.gguf", Parallel: 4})
	if err != nil {
		return
	}
	srv, err := server.New(mos, server.Options{})
	if err != nil {
		return
	}
	hs := &http.Server{Addr: "127.0.0.1:11435", Handler: srv}
	go hs.ListenAndServe()
	// ... on exit: stop HTTP, drain requests, then close the OS (pack writes, stores)
	hs.Shutdown(ctx)
	srv.Shutdown(ctx)
	mos.Close(ctx)
}
