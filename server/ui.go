package server

import (
	"net/http"

	"github.com/memosrt/memosrt/server/ui"
	"github.com/memosrt/memosrt/server/wire"
)

// handleUI answers GET /ui with the playground page (package ui).
func (s *Server) handleUI(w http.ResponseWriter, r *http.Request) {
	if err := ui.Page(w); err != nil {
		s.writeError(w, r, err)
	}
}

// handleStats answers GET /v1/stats (admin token only): the model, the
// OS's gauges (memosrt.Stats) and its budgets with their use
// (memosrt.Budgets). The playground's header shows them.
func (s *Server) handleStats(w http.ResponseWriter, r *http.Request) {
	b, err := s.os.Budgets(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	mi := s.os.Model()
	wire.WriteJSON(w, http.StatusOK, map[string]any{
		"version": s.opts.Version,
		"model": map[string]any{"name": mi.Name, "backend": mi.Backend, "n_ctx": mi.NCtx, "family": mi.Family,
			"parameter_size": mi.ParamSize, "quantization_level": mi.Quant},
		"stats":   s.os.Stats(),
		"budgets": b,
	})
}
