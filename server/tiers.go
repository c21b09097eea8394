package server

import (
	"net/http"
	"strconv"
	"time"

	"github.com/memosrt/memosrt/server/wire"
)

// handleTiers answers GET /v1/cubes/{cube}/tiers[?limit=N]: each memory's
// tier and heat, the cube's pack, pending jobs and the last N transitions
// (scheduler.Tiers.State).
func (s *Server) handleTiers(w http.ResponseWriter, r *http.Request) {
	rec, err := s.pathCube(r)
	limit := 50
	if v := r.URL.Query().Get("limit"); err == nil && v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 0 {
			err = wire.BadField("limit", "%q is not a count", v)
		}
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	st, err := s.os.Tiers(r.Context(), rec.Name, limit)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, st)
}

// handleTick answers POST /v1/tiers/tick: one scheduler tick now
// (memosrt.OS.Tick), reporting what it planned and ran.
func (s *Server) handleTick(w http.ResponseWriter, r *http.Request) {
	rep, err := s.os.Tick(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, map[string]int{"planned": rep.Planned, "done": rep.Done, "failed": rep.Failed})
}

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
