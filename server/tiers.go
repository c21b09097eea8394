package server

import (
	"fmt"
	"net/http"
	"strconv"
)

// handleTiers answers GET /v1/cubes/{cube}/tiers[?limit=N]: each memory's
// tier and heat, the cube's pack, pending jobs and the last N transitions
// (scheduler.Tiers.State).
func (s *Server) handleTiers(w http.ResponseWriter, r *http.Request) {
	rec, err := s.pathCube(r)
	if err == nil && s.opts.Tiers == nil {
		err = fmt.Errorf("%w: tiers are not enabled on this server", ErrNotSupported)
	}
	limit := 50
	if v := r.URL.Query().Get("limit"); err == nil && v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 0 {
			err = badField("limit", "%q is not a count", v)
		}
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	st, err := s.opts.Tiers.State(r.Context(), rec.Name, limit)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}
