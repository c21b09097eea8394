package memory

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/server/wire"
	"github.com/memosrt/memosrt/textmem"
)

// CubeView is a cube as the memory API shows it (POST and GET
// /v1/cubes/...): its record with the number of memories it holds and of
// its stored KV packs (0 in the answer to a create).
type CubeView struct {
	memosrt.Cube
	Memories int `json:"memories"`
	// Vectors is how many memories have a vector of the serve's
	// embedding model (0 without one).
	Vectors int `json:"vectors"`
	Packs   int `json:"packs"`
}

func (a *API) view(ctx context.Context, rec memosrt.Cube) (CubeView, error) {
	mems, err := a.os.Memories(ctx, rec.Name)
	if err != nil {
		return CubeView{}, err
	}
	vecs, err := a.os.Vectors(ctx, rec.Name)
	if err != nil {
		return CubeView{}, err
	}
	st, err := a.os.Packs(ctx, rec.Name)
	if err != nil {
		return CubeView{}, err
	}
	return CubeView{Cube: rec, Memories: len(mems), Vectors: vecs, Packs: len(st.Packs)}, nil
}

type cubeCreateRequest struct {
	Name        string            `json:"name"`
	Description string            `json:"description"`
	Metadata    map[string]string `json:"metadata"`
	// NoRecord keeps the cube's chat turns out of its memory
	// (memosrt.Cube.NoRecord).
	NoRecord bool `json:"no_record"`
	// Assistant marks an assistant's cube (memosrt.Cube.Assistant).
	Assistant bool `json:"assistant"`
}

func (a *API) handleCubeCreate(w http.ResponseWriter, r *http.Request) {
	var req cubeCreateRequest
	if err := wire.DecodeStrict(r, &req); err != nil {
		a.writeError(w, r, err)
		return
	}
	if !textmem.ValidCube(req.Name) {
		a.writeError(w, r, wire.BadField("name", "%q is not a cube name (1..64 of [A-Za-z0-9._-], not . or ..)", req.Name))
		return
	}
	rec, err := a.os.CreateCube(r.Context(), memosrt.Cube{Name: req.Name, Description: req.Description, Metadata: req.Metadata,
		NoRecord: req.NoRecord, Assistant: req.Assistant})
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusCreated, CubeView{Cube: rec})
}

func (a *API) handleCubeList(w http.ResponseWriter, r *http.Request) {
	recs, err := a.os.Cubes(r.Context())
	out := []CubeView{}
	k := wire.Key(r)
	for _, rec := range recs {
		if err != nil {
			break
		}
		if k != nil {
			// an access key sees the cubes it has a grant on (made for
			// the cube of that name now)
			g, ok := k.Grant(rec.Name)
			if !ok || !g.CubeCreated.IsZero() && !g.CubeCreated.Equal(rec.Created) {
				continue
			}
		}
		var v CubeView
		v, err = a.view(r.Context(), rec)
		out = append(out, v)
	}
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, map[string]any{"cubes": out})
}

// pathCube reads and checks the {cube} path value.
func (a *API) pathCube(r *http.Request) (memosrt.Cube, error) {
	name := r.PathValue("cube")
	if !textmem.ValidCube(name) {
		return memosrt.Cube{}, wire.BadField("cube", "%q is not a cube name (1..64 of [A-Za-z0-9._-], not . or ..)", name)
	}
	return a.os.Cube(r.Context(), name)
}

// pathCubeName reads and checks the {cube} path value without requiring
// the cube to exist (adding a memory creates it).
func (a *API) pathCubeName(r *http.Request) (string, error) {
	name := r.PathValue("cube")
	if !textmem.ValidCube(name) {
		return "", wire.BadField("cube", "%q is not a cube name (1..64 of [A-Za-z0-9._-], not . or ..)", name)
	}
	return name, nil
}

func (a *API) handleCubeGet(w http.ResponseWriter, r *http.Request) {
	rec, err := a.pathCube(r)
	var v CubeView
	if err == nil {
		v, err = a.view(r.Context(), rec)
	}
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, v)
}

func (a *API) handleCubeDelete(w http.ResponseWriter, r *http.Request) {
	rec, err := a.pathCube(r)
	if err == nil {
		err = a.os.DeleteCube(r.Context(), rec.Name)
	}
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// memoryInput is one memory to add.
type memoryInput struct {
	Text      string    `json:"text"`
	Kind      string    `json:"kind"`
	Tags      []string  `json:"tags"`
	Source    string    `json:"source"`
	EventTime time.Time `json:"event_time"`
	// Confidence is in [0, 1]; 0 means unstated.
	Confidence float64 `json:"confidence"`
	// Expires (RFC 3339) has the memory deleted by the first tier tick
	// after it; absent means never.
	Expires time.Time `json:"expires"`
}

type memoryAddRequest struct {
	memoryInput
	Memories []memoryInput `json:"memories"`
}

func (a *API) handleMemoryAdd(w http.ResponseWriter, r *http.Request) {
	var req memoryAddRequest
	cube, err := a.pathCubeName(r)
	if err == nil {
		err = wire.DecodeStrict(r, &req)
	}
	if err == nil && req.Memories != nil && req.Text != "" {
		err = wire.BadField("memories", "give either text or memories, not both")
	}
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	batch := req.Memories != nil
	in := req.Memories
	if !batch {
		in = []memoryInput{req.memoryInput}
	}
	out := make([]textmem.Memory, 0, len(in))
	for i, m := range in {
		field := "text"
		if batch {
			field = fmt.Sprintf("memories[%d].text", i)
		}
		if strings.TrimSpace(m.Text) == "" {
			a.writeError(w, r, wire.BadField(field, "empty text"))
			return
		}
		got, err := a.os.AddMemory(r.Context(), cube, textmem.Memory{Text: m.Text, Kind: m.Kind, Tags: m.Tags,
			Source: m.Source, EventTime: m.EventTime.UTC(), Confidence: m.Confidence, Expires: m.Expires.UTC()})
		if err != nil {
			if errors.Is(err, textmem.ErrTooLarge) || errors.Is(err, textmem.ErrInvalidUTF8) {
				err = wire.InField(field, err)
			}
			a.writeError(w, r, err)
			return
		}
		out = append(out, got)
	}
	if batch {
		wire.WriteJSON(w, http.StatusCreated, map[string]any{"memories": out})
		return
	}
	wire.WriteJSON(w, http.StatusCreated, out[0])
}

func (a *API) handleMemoryList(w http.ResponseWriter, r *http.Request) {
	rec, err := a.pathCube(r)
	var mems []textmem.Memory
	if err == nil {
		mems, err = a.os.Memories(r.Context(), rec.Name)
	}
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, map[string]any{"memories": mems})
}

func (a *API) handleMemoryGet(w http.ResponseWriter, r *http.Request) {
	rec, err := a.pathCube(r)
	var m textmem.Memory
	if err == nil {
		m, err = a.os.Memory(r.Context(), rec.Name, r.PathValue("id"))
	}
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, m)
}

// handleMemoryUpdate answers PUT (the text is replaced; "text" required)
// and PATCH (only the fields given change: text, kind, tags, source).
func (a *API) handleMemoryUpdate(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Text   *string   `json:"text"`
		Kind   *string   `json:"kind"`
		Tags   *[]string `json:"tags"`
		Source *string   `json:"source"`
	}
	rec, err := a.pathCube(r)
	if err == nil {
		err = wire.DecodeStrict(r, &req)
	}
	switch {
	case err != nil:
	case r.Method == http.MethodPut && (req.Text == nil || req.Kind != nil || req.Tags != nil || req.Source != nil):
		err = wire.BadField("text", "PUT replaces the text only and needs it; PATCH changes kind, tags or source")
	case r.Method == http.MethodPatch && req.Text == nil && req.Kind == nil && req.Tags == nil && req.Source == nil:
		err = wire.BadField("body", "nothing to change: give text, kind, tags or source")
	case req.Text != nil && strings.TrimSpace(*req.Text) == "":
		err = wire.BadField("text", "empty text")
	}
	var m textmem.Memory
	if err == nil {
		m, err = a.os.PatchMemory(r.Context(), rec.Name, r.PathValue("id"), textmem.Patch{Text: req.Text, Kind: req.Kind, Tags: req.Tags, Source: req.Source})
	}
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, m)
}

func (a *API) handleMemoryDelete(w http.ResponseWriter, r *http.Request) {
	rec, err := a.pathCube(r)
	if err == nil {
		err = a.os.DeleteMemory(r.Context(), rec.Name, r.PathValue("id"))
	}
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

type searchRequest struct {
	Query string   `json:"query"`
	K     int      `json:"k"`
	Kinds []string `json:"kinds"`
	Tags  []string `json:"tags"`
	// IncludeTurns returns the cube's recorded chat turns too (Kind
	// "turn"), after every other hit; kinds naming "turn" asks for them
	// as well.
	IncludeTurns bool `json:"include_turns"`
}

func (a *API) handleSearch(w http.ResponseWriter, r *http.Request) {
	var req searchRequest
	rec, err := a.pathCube(r)
	if err == nil {
		if r.Method == http.MethodGet {
			req.Query = r.URL.Query().Get("q")
			if k := r.URL.Query().Get("k"); k != "" {
				if req.K, err = strconv.Atoi(k); err != nil {
					err = wire.BadField("k", "%q is not an integer", k)
				}
			}
			if v := r.URL.Query().Get("include_turns"); v != "" && err == nil {
				if req.IncludeTurns, err = strconv.ParseBool(v); err != nil {
					err = wire.BadField("include_turns", "%q is not true or false", v)
				}
			}
		} else {
			err = wire.DecodeStrict(r, &req)
		}
	}
	if err == nil && req.K < 0 {
		err = wire.BadField("k", "%d < 0", req.K)
	}
	if err == nil && strings.TrimSpace(req.Query) == "" {
		err = wire.BadField("query", "empty query")
	}
	var hits []textmem.Hit
	if err == nil {
		q := memosrt.SearchQuery(req.Query, req.K, req.IncludeTurns || slices.Contains(req.Kinds, memosrt.KindTurn))
		q.Kinds, q.Tags = req.Kinds, req.Tags
		hits, err = a.os.Search(r.Context(), rec.Name, q)
	}
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	if hits == nil {
		hits = []textmem.Hit{}
	}
	wire.WriteJSON(w, http.StatusOK, map[string]any{"hits": hits})
}

func (a *API) handlePackWarm(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Resident bool `json:"resident"`
	}
	rec, err := a.pathCube(r)
	if err == nil && r.ContentLength != 0 {
		err = wire.DecodeStrict(r, &req)
		if fe := (*memosrt.FieldError)(nil); errors.As(err, &fe) && fe.Msg == "empty request body" {
			err = nil
		}
	}
	var st memosrt.PackStatus
	if err == nil {
		st, err = a.os.Warm(r.Context(), rec.Name, memosrt.WarmOptions{Resident: req.Resident})
	}
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, st)
}

// handleChunks computes the KV chunks of the memories the body names
// ({"ids": [...]}; none or no body: all of the cube's) and answers
// {"made": n, "present": n}.
func (a *API) handleChunks(w http.ResponseWriter, r *http.Request) {
	var req struct {
		IDs []string `json:"ids"`
	}
	rec, err := a.pathCube(r)
	if err == nil && r.ContentLength != 0 {
		err = wire.DecodeStrict(r, &req)
		if fe := (*memosrt.FieldError)(nil); errors.As(err, &fe) && fe.Msg == "empty request body" {
			err = nil
		}
	}
	var res memosrt.ChunkResult
	if err == nil {
		res, err = a.os.MakeChunks(r.Context(), rec.Name, req.IDs)
	}
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, res)
}

func (a *API) handlePackStatus(w http.ResponseWriter, r *http.Request) {
	rec, err := a.pathCube(r)
	var st memosrt.PackStatus
	if err == nil {
		st, err = a.os.Packs(r.Context(), rec.Name)
	}
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, st)
}

// handlePackList answers GET /v1/packs: every stored pack (memosrt kv ls).
func (a *API) handlePackList(w http.ResponseWriter, r *http.Request) {
	packs, err := a.os.AllPacks(r.Context())
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	if packs == nil {
		packs = []kvcache.Info{}
	}
	wire.WriteJSON(w, http.StatusOK, map[string]any{"packs": packs})
}

func (a *API) handleCubeExport(w http.ResponseWriter, r *http.Request) {
	rec, err := a.pathCube(r)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-tar")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s.memosrt.tar"`, rec.Name))
	if err := a.os.ExportCube(r.Context(), rec.Name, w); err != nil {
		a.log.Warn("export failed mid-stream", "cube", rec.Name, "err", err)
	}
}

// handleCubeImport reads a cube archive. ?cube=NAME imports under another
// name; ?replace=true replaces an existing cube of that name (else 409).
func (a *API) handleCubeImport(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if c := q.Get("cube"); c != "" && !textmem.ValidCube(c) {
		a.writeError(w, r, wire.BadField("cube", "%q is not a cube name", c))
		return
	}
	res, err := a.os.ImportCube(r.Context(), r.Body, memosrt.ImportOptions{Cube: q.Get("cube"), Replace: q.Get("replace") == "true"})
	if errors.Is(err, memosrt.ErrCubeExists) {
		err = importConflict{cube: res.Cube}
	}
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusCreated, res)
}

// importConflict is ImportCube's ErrCubeExists told in the route's terms:
// the query parameters that resolve it.
type importConflict struct{ cube string }

func (e importConflict) Error() string {
	return fmt.Sprintf("cube %q exists: import with ?replace=true, or under another name with ?cube=NAME", e.cube)
}

func (e importConflict) Unwrap() error { return memosrt.ErrCubeExists }
