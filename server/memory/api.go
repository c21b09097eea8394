package memory

import (
	"log/slog"
	"net/http"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/server/wire"
)

// Options configure an API. Zero means the default given.
type Options struct {
	// Version is memosrt's version, written into backups
	// (memosrt.OS.Backup). Default "".
	Version string
	// Logger receives failed requests (5xx), exports cut mid-stream and
	// backups sent or failed; nil discards.
	Logger *slog.Logger
}

// API serves the memory API over one memosrt.OS, which the caller keeps
// owning: the handlers of the routes Register adds. It holds no state of
// its own: safe for concurrent use, through the OS's own locking.
type API struct {
	os   *memosrt.OS
	opts Options
	log  *slog.Logger
}

// New returns the memory API over o.
func New(o *memosrt.OS, opts Options) *API {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &API{os: o, opts: opts, log: log}
}

// Register adds the memory API's routes to mux: cubes (/v1/cubes, import,
// export), their memories and search, packs (/v1/cubes/{cube}/pack,
// /v1/packs), tiers and the tier tick, adapters, the conversation memory
// (messages, jobs, profile, turns, sessions, a memory's change log),
// access keys (/v1/keys) and the backup (/v1/backup). Authentication and
// an access key's scope are the enclosing handler's (wire.Scope); a
// pattern mux already has panics, as http.ServeMux does.
func (a *API) Register(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/cubes", a.handleCubeCreate)
	mux.HandleFunc("GET /v1/cubes", a.handleCubeList)
	mux.HandleFunc("POST /v1/cubes/import", a.handleCubeImport)
	mux.HandleFunc("GET /v1/cubes/{cube}", a.handleCubeGet)
	mux.HandleFunc("DELETE /v1/cubes/{cube}", a.handleCubeDelete)
	mux.HandleFunc("POST /v1/cubes/{cube}/memories", a.handleMemoryAdd)
	mux.HandleFunc("GET /v1/cubes/{cube}/memories", a.handleMemoryList)
	mux.HandleFunc("GET /v1/cubes/{cube}/memories/{id}", a.handleMemoryGet)
	mux.HandleFunc("PUT /v1/cubes/{cube}/memories/{id}", a.handleMemoryUpdate)
	mux.HandleFunc("PATCH /v1/cubes/{cube}/memories/{id}", a.handleMemoryUpdate)
	mux.HandleFunc("DELETE /v1/cubes/{cube}/memories/{id}", a.handleMemoryDelete)
	mux.HandleFunc("POST /v1/cubes/{cube}/search", a.handleSearch)
	mux.HandleFunc("GET /v1/cubes/{cube}/search", a.handleSearch)
	mux.HandleFunc("POST /v1/cubes/{cube}/pack", a.handlePackWarm)
	mux.HandleFunc("GET /v1/cubes/{cube}/pack", a.handlePackStatus)
	mux.HandleFunc("GET /v1/cubes/{cube}/export", a.handleCubeExport)
	mux.HandleFunc("GET /v1/cubes/{cube}/tiers", a.handleTiers)
	mux.HandleFunc("GET /v1/packs", a.handlePackList)
	mux.HandleFunc("POST /v1/tiers/tick", a.handleTick)
	mux.HandleFunc("GET /v1/backup", a.handleBackup)
	mux.HandleFunc("GET /v1/cubes/{cube}/adapters", a.handleAdapters)
	// conversation memory (conversations.go)
	mux.HandleFunc("POST /v1/cubes/{cube}/messages", a.handleMessagesAdd)
	mux.HandleFunc("GET /v1/cubes/{cube}/jobs", a.handleJobs)
	mux.HandleFunc("GET /v1/cubes/{cube}/jobs/{id}", a.handleJob)
	mux.HandleFunc("POST /v1/cubes/{cube}/jobs/{id}/undo", a.handleJobUndo)
	mux.HandleFunc("GET /v1/cubes/{cube}/profile", a.handleProfile)
	mux.HandleFunc("GET /v1/cubes/{cube}/turns", a.handleTurns)
	mux.HandleFunc("GET /v1/cubes/{cube}/sessions", a.handleSessions)
	mux.HandleFunc("GET /v1/cubes/{cube}/memories/{id}/log", a.handleMemoryLog)
	mux.HandleFunc("POST /v1/keys", a.handleKeyCreate)
}

// writeError writes err as a JSON error with its status (wire.WriteError).
func (a *API) writeError(w http.ResponseWriter, r *http.Request, err error) {
	wire.WriteError(a.log, w, r, err)
}
