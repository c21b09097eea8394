package server

import (
	"net/http"
	"time"

	"github.com/memosrt/memosrt/server/wire"
)

// handleDebugClock answers POST /v1/debug/clock {"advance_s": N} when the
// server runs with a debug clock (Options.DebugClock, serve --debug-clock).
func (s *Server) handleDebugClock(w http.ResponseWriter, r *http.Request) {
	var req struct {
		AdvanceS float64 `json:"advance_s"`
	}
	if err := wire.Decode(r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if req.AdvanceS < 0 {
		s.writeError(w, r, wire.BadField("advance_s", "want a number of seconds >= 0"))
		return
	}
	s.opts.DebugClock.Advance(time.Duration(req.AdvanceS * float64(time.Second)))
	w.WriteHeader(http.StatusNoContent)
}
