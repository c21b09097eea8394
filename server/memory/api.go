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
	// CreatedBy names who makes a key with request r (AccessKey.CreatedBy:
	// "admin", "local"); nil: "".
	CreatedBy func(r *http.Request) string
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

// Register adds the memory API's routes to rt, each with what it needs of
// the bearer token: cubes (/v1/cubes, import, export), their memories and
// search, packs (/v1/cubes/{cube}/pack, /v1/packs), tiers and the tier
// tick, adapters, the conversation memory (messages, jobs, profile, turns,
// sessions, a memory's change log, feedback on an answer and the response
// log), access keys (/v1/keys) and sharing
// (/v1/cubes/{cube}/share), and the backup (/v1/backup). A route that
// reads a cube needs its read right, one that changes it the write right,
// one beyond a cube the admin token; authentication and those checks are
// rt's (the server's). A pattern rt already has panics, as
// http.ServeMux does.
func (a *API) Register(rt wire.Router) {
	h := func(need wire.Need, pattern string, f http.HandlerFunc) { rt.Handle(need, pattern, f) }
	h(wire.NeedAdmin, "POST /v1/cubes", a.handleCubeCreate)
	h(wire.NeedKey, "GET /v1/cubes", a.handleCubeList) // the key's cubes only
	h(wire.NeedAdmin, "POST /v1/cubes/import", a.handleCubeImport)
	h(wire.NeedRead, "GET /v1/cubes/{cube}", a.handleCubeGet)
	h(wire.NeedWrite, "DELETE /v1/cubes/{cube}", a.handleCubeDelete)
	h(wire.NeedWrite, "POST /v1/cubes/{cube}/memories", a.handleMemoryAdd)
	h(wire.NeedRead, "GET /v1/cubes/{cube}/memories", a.handleMemoryList)
	h(wire.NeedRead, "GET /v1/cubes/{cube}/memories/{id}", a.handleMemoryGet)
	h(wire.NeedWrite, "PUT /v1/cubes/{cube}/memories/{id}", a.handleMemoryUpdate)
	h(wire.NeedWrite, "PATCH /v1/cubes/{cube}/memories/{id}", a.handleMemoryUpdate)
	h(wire.NeedWrite, "DELETE /v1/cubes/{cube}/memories/{id}", a.handleMemoryDelete)
	h(wire.NeedRead, "POST /v1/cubes/{cube}/search", a.handleSearch)
	h(wire.NeedRead, "GET /v1/cubes/{cube}/search", a.handleSearch)
	h(wire.NeedWrite, "POST /v1/cubes/{cube}/pack", a.handlePackWarm)
	h(wire.NeedRead, "GET /v1/cubes/{cube}/pack", a.handlePackStatus)
	h(wire.NeedWrite, "POST /v1/cubes/{cube}/chunks", a.handleChunks)
	h(wire.NeedRead, "GET /v1/cubes/{cube}/export", a.handleCubeExport)
	h(wire.NeedRead, "GET /v1/cubes/{cube}/tiers", a.handleTiers)
	h(wire.NeedAdmin, "GET /v1/packs", a.handlePackList)
	h(wire.NeedAdmin, "POST /v1/tiers/tick", a.handleTick)
	h(wire.NeedAdmin, "GET /v1/backup", a.handleBackup)
	h(wire.NeedRead, "GET /v1/cubes/{cube}/adapters", a.handleAdapters)
	// conversation memory (conversations.go)
	h(wire.NeedWrite, "POST /v1/cubes/{cube}/messages", a.handleMessagesAdd)
	h(wire.NeedRead, "GET /v1/cubes/{cube}/jobs", a.handleJobs)
	h(wire.NeedRead, "GET /v1/cubes/{cube}/jobs/{id}", a.handleJob)
	h(wire.NeedWrite, "POST /v1/cubes/{cube}/jobs/{id}/undo", a.handleJobUndo)
	h(wire.NeedRead, "GET /v1/cubes/{cube}/profile", a.handleProfile)
	h(wire.NeedRead, "GET /v1/cubes/{cube}/turns", a.handleTurns)
	h(wire.NeedRead, "GET /v1/cubes/{cube}/sessions", a.handleSessions)
	h(wire.NeedRead, "GET /v1/cubes/{cube}/memories/{id}/log", a.handleMemoryLog)
	h(wire.NeedWrite, "POST /v1/cubes/{cube}/feedback", a.handleFeedback)
	h(wire.NeedRead, "GET /v1/cubes/{cube}/responses", a.handleResponses)
	// access keys and sharing (keys.go)
	h(wire.NeedAdmin, "POST /v1/keys", a.handleKeyCreate)
	h(wire.NeedAdmin, "GET /v1/keys", a.handleKeyList)
	h(wire.NeedAdmin, "GET /v1/keys/{id}", a.handleKeyGet)
	h(wire.NeedAdmin, "DELETE /v1/keys/{id}", a.handleKeyRevoke)
	h(wire.NeedAdmin, "POST /v1/cubes/{cube}/share", a.handleShare)
	h(wire.NeedAdmin, "DELETE /v1/cubes/{cube}/share/{id}", a.handleUnshare)
}

// writeError writes err as a JSON error with its status (wire.WriteError).
func (a *API) writeError(w http.ResponseWriter, r *http.Request, err error) {
	wire.WriteError(a.log, w, r, err)
}
