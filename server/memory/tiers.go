package memory

import (
	"net/http"
	"strconv"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/server/wire"
)

// handleTiers answers GET /v1/cubes/{cube}/tiers[?limit=N]: each memory's
// tier and heat, the cube's pack, pending jobs and the last N transitions
// (scheduler.Tiers.State).
func (a *API) handleTiers(w http.ResponseWriter, r *http.Request) {
	rec, err := a.pathCube(r)
	limit := 50
	if v := r.URL.Query().Get("limit"); err == nil && v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 0 {
			err = wire.BadField("limit", "%q is not a count", v)
		}
	}
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	st, err := a.os.Tiers(r.Context(), rec.Name, limit)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, st)
}

// handleTick answers POST /v1/tiers/tick: one scheduler tick now
// (memosrt.OS.Tick), reporting what it planned and ran.
func (a *API) handleTick(w http.ResponseWriter, r *http.Request) {
	rep, err := a.os.Tick(r.Context())
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, map[string]int{"planned": rep.Planned, "done": rep.Done, "failed": rep.Failed})
}

// handleAdapters answers GET /v1/cubes/{cube}/adapters: the LoRA adapters
// the cube's requests can attach (its own, then global ones), each with
// whether it is loaded now (memosrt.OS.Adapters).
func (a *API) handleAdapters(w http.ResponseWriter, r *http.Request) {
	rec, err := a.pathCube(r)
	var out []memosrt.AdapterStatus
	if err == nil {
		out, err = a.os.Adapters(r.Context(), rec.Name)
	}
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, map[string]any{"adapters": out})
}
