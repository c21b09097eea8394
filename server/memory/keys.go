package memory

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/server/wire"
	"github.com/memosrt/memosrt/textmem"
)

// Access keys and sharing. Every route here needs the admin token
// (Register); a key's token is in the answer to its creation only, and no
// other answer holds one (only its hash is stored).

// maxExpiresIn bounds expires_in, seconds (100 years).
const maxExpiresIn = 100 * 365 * 24 * 3600

// grantInput is one element of POST /v1/keys' "cubes".
type grantInput struct {
	Cube  string `json:"cube"`
	Right string `json:"right"` // "read" or "write"; "" is read
}

// keyCreateRequest is the body of POST /v1/keys.
type keyCreateRequest struct {
	Name  string       `json:"name"`
	Cubes []grantInput `json:"cubes"`
	// Cube is the older form: one cube, with the write right.
	Cube string `json:"cube"`
	// ExpiresIn is the key's life from now, seconds; ExpiresAt a time
	// (RFC 3339). At most one; neither: the key does not expire.
	ExpiresIn *int64     `json:"expires_in"`
	ExpiresAt *time.Time `json:"expires_at"`
}

// KeyCreated is the answer to POST /v1/keys: the key and its token, shown
// this once.
type KeyCreated struct {
	memosrt.AccessKey
	Token string `json:"token"`
}

// keySpec turns req into a key spec, naming the field of each problem it
// finds itself (the rest, such as an expiry already past by the OS's
// clock, is memosrt.ErrBadKeySpec's).
func (req keyCreateRequest) keySpec() (memosrt.KeySpec, error) {
	spec := memosrt.KeySpec{Name: req.Name}
	switch {
	case req.Cube != "" && len(req.Cubes) > 0:
		return spec, wire.BadField("cube", "give cubes or cube, not both")
	case req.Cube != "":
		if !textmem.ValidCube(req.Cube) {
			return spec, wire.BadField("cube", "%q is not a cube name (1..64 of [A-Za-z0-9._-], not . or ..)", req.Cube)
		}
		spec.Grants = []memosrt.KeyGrant{{Cube: req.Cube, Right: memosrt.KeyWrite}}
	case len(req.Cubes) == 0:
		return spec, wire.BadField("cubes", "no cube: a key names 1 or more cubes, each {\"cube\": NAME, \"right\": \"read\"|\"write\"}")
	}
	for i, g := range req.Cubes {
		if !textmem.ValidCube(g.Cube) {
			return spec, wire.BadField(fmt.Sprintf("cubes[%d].cube", i), "%q is not a cube name (1..64 of [A-Za-z0-9._-], not . or ..)", g.Cube)
		}
		right := memosrt.KeyRead
		if g.Right != "" {
			var err error
			if right, err = memosrt.ParseKeyRight(g.Right); err != nil {
				return spec, wire.BadField(fmt.Sprintf("cubes[%d].right", i), "%q: want \"read\" or \"write\"", g.Right)
			}
		}
		spec.Grants = append(spec.Grants, memosrt.KeyGrant{Cube: g.Cube, Right: right})
	}
	switch {
	case req.ExpiresIn != nil && req.ExpiresAt != nil:
		return spec, wire.BadField("expires_in", "give expires_in or expires_at, not both")
	case req.ExpiresIn != nil:
		if *req.ExpiresIn <= 0 || *req.ExpiresIn > maxExpiresIn {
			return spec, wire.BadField("expires_in", "%d: want 1..%d seconds", *req.ExpiresIn, maxExpiresIn)
		}
		spec.ExpiresIn = time.Duration(*req.ExpiresIn) * time.Second
	case req.ExpiresAt != nil:
		if req.ExpiresAt.IsZero() {
			return spec, wire.BadField("expires_at", "the zero time: leave expires_at out for a key that does not expire")
		}
		spec.Expires = *req.ExpiresAt
	}
	return spec, nil
}

// handleKeyCreate answers POST /v1/keys {"name", "cubes": [{"cube",
// "right"}], "expires_in" | "expires_at"} (or the older {"cube"}: write
// on one cube): 201 with the key and its token, shown once.
func (a *API) handleKeyCreate(w http.ResponseWriter, r *http.Request) {
	var req keyCreateRequest
	err := wire.DecodeStrict(r, &req)
	var spec memosrt.KeySpec
	if err == nil {
		spec, err = req.keySpec()
	}
	var k memosrt.AccessKey
	var tok string
	if err == nil {
		if a.opts.CreatedBy != nil {
			spec.CreatedBy = a.opts.CreatedBy(r)
		}
		k, tok, err = a.os.CreateKey(r.Context(), spec)
	}
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusCreated, KeyCreated{AccessKey: k, Token: tok})
}

// handleKeyList answers GET /v1/keys: {"keys": [...]}, oldest first,
// without tokens.
func (a *API) handleKeyList(w http.ResponseWriter, r *http.Request) {
	keys, err := a.os.Keys(r.Context())
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	if keys == nil {
		keys = []memosrt.AccessKey{}
	}
	wire.WriteJSON(w, http.StatusOK, map[string]any{"keys": keys})
}

// handleKeyGet answers GET /v1/keys/{id}: the key, without its token.
func (a *API) handleKeyGet(w http.ResponseWriter, r *http.Request) {
	k, err := a.os.GetKey(r.Context(), r.PathValue("id"))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, k)
}

// handleKeyRevoke answers DELETE /v1/keys/{id}: 204; its token is refused
// (401) from the next request on, on every node sharing the text store.
func (a *API) handleKeyRevoke(w http.ResponseWriter, r *http.Request) {
	if err := a.os.RevokeKey(r.Context(), r.PathValue("id")); err != nil {
		a.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// handleShare answers POST /v1/cubes/{cube}/share {"key_id", "right"}:
// the key gets right ("read" when not given) on the cube, replacing the
// right it had there; 200 with the key.
func (a *API) handleShare(w http.ResponseWriter, r *http.Request) {
	var req struct {
		KeyID string `json:"key_id"`
		Right string `json:"right"`
	}
	cube, err := a.pathCubeName(r)
	if err == nil {
		err = wire.DecodeStrict(r, &req)
	}
	right := memosrt.KeyRead
	switch {
	case err != nil:
	case req.KeyID == "":
		err = wire.BadField("key_id", "empty: the id of the key to share the cube with (GET /v1/keys lists them)")
	case req.Right != "":
		if right, err = memosrt.ParseKeyRight(req.Right); err != nil {
			err = wire.BadField("right", "%q: want \"read\" or \"write\"", req.Right)
		}
	}
	var k memosrt.AccessKey
	if err == nil {
		k, err = a.os.ShareCube(r.Context(), cube, req.KeyID, right)
	}
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, k)
}

// handleUnshare answers DELETE /v1/cubes/{cube}/share/{id}: the key loses
// its grant on the cube; 200 with the key. Its only cube is a 409 (revoke
// the key instead).
func (a *API) handleUnshare(w http.ResponseWriter, r *http.Request) {
	cube, err := a.pathCubeName(r)
	var k memosrt.AccessKey
	if err == nil {
		k, err = a.os.UnshareCube(r.Context(), cube, r.PathValue("id"))
	}
	if errors.Is(err, memosrt.ErrLastGrant) {
		err = fmt.Errorf("%w (DELETE /v1/keys/%s)", err, r.PathValue("id"))
	}
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, k)
}
