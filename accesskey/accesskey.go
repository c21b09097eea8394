package accesskey

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/memosrt/memosrt/textmem"
)

// TokenPrefix starts every token (tells them apart in logs).
const TokenPrefix = "msk_"

// IDPrefix starts the id of every key made by Create: "key_" and the first
// 12 hex digits of the token's SHA-256. Keys made before grants existed
// keep their id of 12 hex digits.
const IDPrefix = "key_"

// Limits of a Spec.
const (
	// MaxGrants is the most cubes one key may name.
	MaxGrants = 256
	// MaxName is the longest key name, bytes.
	MaxName = 200
)

// Backend key layout inside textmem.KeySpace: the record by the token's
// hash, and the hash by the key's id (for listing by id and revoking).
const (
	pHash = "h/" // h/<sha256 hex of the token> → record JSON
	pID   = "i/" // i/<id> → sha256 hex of the token
)

// Right is what a grant lets a key do in its cube.
type Right string

// Rights. Write includes Read.
const (
	// Read lets a key get, list, search and export the cube's memories,
	// read its packs' status, tiers, jobs, profile, turns and sessions,
	// and chat or generate with the cube's memories in the prompt.
	Read Right = "read"
	// Write is Read and every change of the cube: add, edit and delete
	// memories, warm packs, record chat turns, add messages, undo jobs,
	// delete the cube.
	Write Right = "write"
)

// ParseRight reads "read" or "write"; anything else wraps ErrBadSpec.
func ParseRight(s string) (Right, error) {
	switch r := Right(s); r {
	case Read, Write:
		return r, nil
	}
	return "", fmt.Errorf("%w: right %q: want \"read\" or \"write\"", ErrBadSpec, s)
}

// ParseGrant reads a grant written NAME[:RIGHT] (memosrt keys create
// --cube), RIGHT read (the default) or write. Errors: textmem.ErrBadCube
// (wrapped) for a bad cube name, ErrBadSpec (wrapped) for another right.
func ParseGrant(s string) (Grant, error) {
	name, right, hasRight := strings.Cut(s, ":")
	if !textmem.ValidCube(name) {
		return Grant{}, fmt.Errorf("%w (1..64 of [A-Za-z0-9._-], not . or ..)", textmem.ErrBadCube)
	}
	g := Grant{Cube: name, Right: Read}
	if hasRight {
		if g.Right = Right(right); g.Right != Read && g.Right != Write {
			return Grant{}, fmt.Errorf("%w: right %q: want read or write", ErrBadSpec, right)
		}
	}
	return g, nil
}

// FormatGrants writes grants as ParseGrant reads each, joined by ", ":
// "shop:read, blog:write".
func FormatGrants(gs []Grant) string {
	parts := make([]string, len(gs))
	for i, g := range gs {
		parts[i] = g.Cube + ":" + string(g.Right)
	}
	return strings.Join(parts, ", ")
}

// Allows reports whether a grant of right r covers need (Write covers
// both).
func (r Right) Allows(need Right) bool { return r == Write || (r == Read && need == Read) }

// Grant is one cube a key may use and how.
type Grant struct {
	Cube  string `json:"cube"`
	Right Right  `json:"right"`
	// CubeCreated is the creation time of the cube the grant was made
	// for: a cube deleted and made again under the same name (on another
	// node sharing the text store, unheard here) is another cube, and the
	// grant does not open it. Zero in grants of keys made before cubes
	// had creation times.
	CubeCreated time.Time `json:"cube_created,omitzero"`
}

// Key is an access key's record: never its token, which is shown once.
type Key struct {
	// ID names the key in lists and in revoking: IDPrefix and 12 hex
	// digits (12 hex digits alone for keys made before IDPrefix).
	ID string `json:"id"`
	// Name is a label chosen by whoever made the key; may be empty.
	Name string `json:"name,omitempty"`
	// Grants are the cubes the key may use, each once, in the order given.
	Grants  []Grant   `json:"grants"`
	Created time.Time `json:"created"`
	// Expires is when the key stops working; zero: never.
	Expires time.Time `json:"expires,omitzero"`
	// CreatedBy says who made the key: "admin" (serve's --token),
	// "local" (the CLI through a running serve), or what a Go caller
	// put in Spec.CreatedBy.
	CreatedBy string `json:"created_by,omitempty"`
}

// Grant returns k's grant on cube.
func (k Key) Grant(cube string) (Grant, bool) {
	for _, g := range k.Grants {
		if g.Cube == cube {
			return g, true
		}
	}
	return Grant{}, false
}

// Cubes returns the cubes k has grants on, in grant order.
func (k Key) Cubes() []string {
	out := make([]string, len(k.Grants))
	for i, g := range k.Grants {
		out[i] = g.Cube
	}
	return out
}

// Expired reports whether k no longer works at now.
func (k Key) Expired(now time.Time) bool { return !k.Expires.IsZero() && !now.Before(k.Expires) }

// Bound reports whether k's grant on cube remembers the creation time of
// its cube (keys made before cubes had creation times do not): only then
// does Guard.Allows read the cube's record.
func (k Key) Bound(cube string) bool {
	gr, ok := k.Grant(cube)
	return ok && !gr.CubeCreated.IsZero()
}

// Allows returns nil when k's grants let it use cube with need, else an
// error wrapping ErrDenied that names the key, the cube, the right missing
// and what the key has there. It checks neither expiry nor whether cube
// is still the cube the grant was made for (Guard checks both).
func (k Key) Allows(cube string, need Right) error {
	g, ok := k.Grant(cube)
	switch {
	case !ok:
		return fmt.Errorf("%w: key %s has no %s right on cube %q (no right there)", ErrDenied, k.ID, need, cube)
	case !g.Right.Allows(need):
		return fmt.Errorf("%w: key %s has no %s right on cube %q (only %s)", ErrDenied, k.ID, need, cube, g.Right)
	}
	return nil
}

// Spec is what Create makes a key of.
type Spec struct {
	Name string
	// Grants: 1..MaxGrants, each cube once (a valid cube name), each
	// right Read or Write. CubeCreated is stored as given.
	Grants []Grant
	// Expires: zero for never; else after Create's now.
	Expires time.Time
	// ExpiresIn, when positive, makes the key expire that long after
	// Create's now (Expires must then be zero).
	ExpiresIn time.Duration
	CreatedBy string
}

// check reports every problem of s at once (wrapping ErrBadSpec), for a
// key made at now.
func (s Spec) check(now time.Time) error {
	var errs []error
	if len(s.Name) > MaxName || !utf8.ValidString(s.Name) {
		errs = append(errs, fmt.Errorf("name: %d bytes or not UTF-8 (at most %d bytes of UTF-8)", len(s.Name), MaxName))
	}
	if len(s.Grants) == 0 || len(s.Grants) > MaxGrants {
		errs = append(errs, fmt.Errorf("%d cubes: a key names 1..%d", len(s.Grants), MaxGrants))
	}
	seen := map[string]bool{}
	for i, g := range s.Grants {
		if !textmem.ValidCube(g.Cube) {
			errs = append(errs, fmt.Errorf("cubes[%d]: %q is not a cube name", i, g.Cube))
		}
		if seen[g.Cube] {
			errs = append(errs, fmt.Errorf("cubes[%d]: cube %q named twice", i, g.Cube))
		}
		seen[g.Cube] = true
		if _, err := ParseRight(string(g.Right)); err != nil {
			errs = append(errs, fmt.Errorf("cubes[%d]: right %q: want \"read\" or \"write\"", i, g.Right))
		}
	}
	if s.ExpiresIn < 0 || s.ExpiresIn > 0 && !s.Expires.IsZero() {
		errs = append(errs, fmt.Errorf("expires in %v: want a positive life, and no expiry time with it", s.ExpiresIn))
	}
	if !s.Expires.IsZero() && !s.Expires.After(now) {
		errs = append(errs, fmt.Errorf("expires %s: not after now (%s)", s.Expires.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339)))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrBadSpec, errors.Join(errs...))
	}
	return nil
}

// record is a Key as stored; Cube and CubeCreated are the format before
// grants (one cube, with every right), read as a Write grant.
type record struct {
	Key
	Cube        string    `json:"cube,omitempty"`
	CubeCreated time.Time `json:"cube_created,omitzero"`
}

func decode(v []byte) (Key, error) {
	var r record
	if err := json.Unmarshal(v, &r); err != nil {
		return Key{}, fmt.Errorf("accesskey: bad key record: %w", err)
	}
	k := r.Key
	if len(k.Grants) == 0 && r.Cube != "" {
		k.Grants = []Grant{{Cube: r.Cube, Right: Write, CubeCreated: r.CubeCreated}}
	}
	return k, nil
}

// Store is the access keys of one text store (textmem.Backend), in its
// space textmem.KeySpace: every node sharing the store sees every key, and
// a key revoked on one node is refused by the next lookup on every node
// (nothing is cached).
type Store struct {
	be textmem.Backend
}

// New returns the key store in be. It does not own be. Keys of the format
// kept in the data directory itself move in with Migrate.
func New(be textmem.Backend) *Store { return &Store{be: be} }

// Create stores a new key of spec, made at now, and returns it with its
// token (32 random bytes, hex, after TokenPrefix), which is not stored
// (only its SHA-256 is). Errors: ErrBadSpec (every problem of spec),
// the store's (datadir.ErrNoSpace, textmem.ErrUnavailable).
func (s *Store) Create(ctx context.Context, spec Spec, now time.Time) (Key, string, error) {
	if err := spec.check(now); err != nil {
		return Key{}, "", err
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return Key{}, "", err
	}
	tok := TokenPrefix + hex.EncodeToString(b[:])
	h := hashToken(tok)
	k := Key{ID: IDPrefix + h[:12], Name: spec.Name, Grants: slices.Clone(spec.Grants), Created: now.UTC(), CreatedBy: spec.CreatedBy}
	if !spec.Expires.IsZero() {
		k.Expires = spec.Expires.UTC()
	}
	if spec.ExpiresIn > 0 {
		k.Expires = now.Add(spec.ExpiresIn).UTC()
	}
	for i := range k.Grants {
		k.Grants[i].CubeCreated = k.Grants[i].CubeCreated.UTC()
	}
	js, _ := json.Marshal(k)
	err := s.be.Update(ctx, textmem.KeySpace, func(txn textmem.Txn) error {
		if _, err := txn.Get([]byte(pID + k.ID)); err == nil {
			return fmt.Errorf("accesskey: key id %s taken (a 48-bit collision): try again", k.ID)
		} else if !errors.Is(err, textmem.ErrKeyNotFound) {
			return err
		}
		if err := txn.Set([]byte(pHash+h), js); err != nil {
			return err
		}
		return txn.Set([]byte(pID+k.ID), []byte(h))
	})
	if err != nil {
		return Key{}, "", fmt.Errorf("accesskey: store key: %w", err)
	}
	return k, tok, nil
}

// Lookup returns the key of token; ErrUnknown when there is none. It
// checks neither expiry nor the key's cubes. Every call reads the store.
func (s *Store) Lookup(ctx context.Context, token string) (Key, error) {
	if !strings.HasPrefix(token, TokenPrefix) {
		return Key{}, ErrUnknown
	}
	var k Key
	err := s.be.View(ctx, textmem.KeySpace, func(txn textmem.Txn) error {
		v, err := txn.Get([]byte(pHash + hashToken(token)))
		if err != nil {
			return err
		}
		k, err = decode(v)
		return err
	})
	if errors.Is(err, textmem.ErrKeyNotFound) {
		return Key{}, ErrUnknown
	}
	return k, err
}

// Get returns the key with id; ErrNotFound when there is none.
func (s *Store) Get(ctx context.Context, id string) (Key, error) {
	var k Key
	err := s.be.View(ctx, textmem.KeySpace, func(txn textmem.Txn) error {
		var err error
		k, _, err = get(txn, id)
		return err
	})
	return k, err
}

// get reads the key with id and its token's hash in txn.
func get(txn textmem.Txn, id string) (Key, string, error) {
	if id == "" || len(id) > 64 {
		return Key{}, "", fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	h, err := txn.Get([]byte(pID + id))
	if errors.Is(err, textmem.ErrKeyNotFound) {
		return Key{}, "", fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	if err != nil {
		return Key{}, "", err
	}
	v, err := txn.Get([]byte(pHash + string(h)))
	if errors.Is(err, textmem.ErrKeyNotFound) {
		return Key{}, "", fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	if err != nil {
		return Key{}, "", err
	}
	k, err := decode(v)
	return k, string(h), err
}

// List returns every key, oldest first (by Created, then ID).
func (s *Store) List(ctx context.Context) ([]Key, error) {
	var out []Key
	err := s.be.View(ctx, textmem.KeySpace, func(txn textmem.Txn) error {
		out = out[:0]
		return txn.Iterate([]byte(pHash), false, func(_, v []byte) error {
			k, err := decode(v)
			if err == nil {
				out = append(out, k)
			}
			return err
		})
	})
	slices.SortFunc(out, func(a, b Key) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, err
}

// Revoke deletes the key with id: the next Lookup of its token, on any
// node of the store, is ErrUnknown. Errors: ErrNotFound, the store's.
func (s *Store) Revoke(ctx context.Context, id string) error {
	return s.be.Update(ctx, textmem.KeySpace, func(txn textmem.Txn) error {
		_, h, err := get(txn, id)
		if err != nil {
			return err
		}
		if err := txn.Delete([]byte(pHash + h)); err != nil {
			return err
		}
		return txn.Delete([]byte(pID + id))
	})
}

// SetGrant gives the key with id grant g: a grant on g.Cube replaces the
// one it had (so a right goes down as well as up), else g is added.
// Errors: ErrNotFound, ErrBadSpec (a bad cube or right, or MaxGrants
// reached), the store's.
func (s *Store) SetGrant(ctx context.Context, id string, g Grant) (Key, error) {
	if !textmem.ValidCube(g.Cube) {
		return Key{}, fmt.Errorf("%w: %q is not a cube name", ErrBadSpec, g.Cube)
	}
	if _, err := ParseRight(string(g.Right)); err != nil {
		return Key{}, err
	}
	g.CubeCreated = g.CubeCreated.UTC()
	return s.change(ctx, id, func(k *Key) error {
		for i := range k.Grants {
			if k.Grants[i].Cube == g.Cube {
				k.Grants[i] = g
				return nil
			}
		}
		if len(k.Grants) >= MaxGrants {
			return fmt.Errorf("%w: key %s names %d cubes, the most a key may", ErrBadSpec, k.ID, MaxGrants)
		}
		k.Grants = append(k.Grants, g)
		return nil
	})
}

// RemoveGrant takes cube from the key with id. Errors: ErrNotFound (no
// such key, or no grant on cube), ErrLastGrant, the store's.
func (s *Store) RemoveGrant(ctx context.Context, id, cube string) (Key, error) {
	return s.change(ctx, id, func(k *Key) error {
		i := slices.IndexFunc(k.Grants, func(g Grant) bool { return g.Cube == cube })
		switch {
		case i < 0:
			return fmt.Errorf("%w: key %s has no grant on cube %q", ErrNotFound, k.ID, cube)
		case len(k.Grants) == 1:
			return fmt.Errorf("%w: key %s (cube %q)", ErrLastGrant, k.ID, cube)
		}
		k.Grants = slices.Delete(k.Grants, i, i+1)
		return nil
	})
}

// change applies fn to the key with id in one transaction and stores it.
func (s *Store) change(ctx context.Context, id string, fn func(*Key) error) (Key, error) {
	var out Key
	err := s.be.Update(ctx, textmem.KeySpace, func(txn textmem.Txn) error {
		k, h, err := get(txn, id)
		if err != nil {
			return err
		}
		if err := fn(&k); err != nil {
			return err
		}
		js, _ := json.Marshal(k)
		out = k
		return txn.Set([]byte(pHash+h), js)
	})
	return out, err
}

// Cubes returns the cubes that keys have grants on, each once, sorted.
func (s *Store) Cubes(ctx context.Context) ([]string, error) {
	keys, err := s.List(ctx)
	var out []string
	for _, k := range keys {
		for _, g := range k.Grants {
			if !slices.Contains(out, g.Cube) {
				out = append(out, g.Cube)
			}
		}
	}
	slices.Sort(out)
	return out, err
}

// DropCube takes cube out of every key's grants (its cube is deleted),
// but for grants on the cube created at keep (zero: none is kept: a cube
// made again since the delete keeps its own grants). A key left without
// grants is deleted, as a key of one cube was before grants. It returns
// how many grants it took.
func (s *Store) DropCube(ctx context.Context, cube string, keep time.Time) (int, error) {
	var n int
	err := s.be.Update(ctx, textmem.KeySpace, func(txn textmem.Txn) error {
		n = 0
		type change struct {
			hash string
			k    Key
		}
		var changes []change
		err := txn.Iterate([]byte(pHash), false, func(key, v []byte) error {
			k, err := decode(v)
			if err != nil {
				return err
			}
			before := len(k.Grants)
			k.Grants = slices.DeleteFunc(k.Grants, func(g Grant) bool {
				return g.Cube == cube && (keep.IsZero() || !g.CubeCreated.Equal(keep))
			})
			if len(k.Grants) != before {
				n += before - len(k.Grants)
				changes = append(changes, change{string(key[len(pHash):]), k})
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, c := range changes {
			if len(c.k.Grants) == 0 {
				if err := txn.Delete([]byte(pHash + c.hash)); err != nil {
					return err
				}
				if err := txn.Delete([]byte(pID + c.k.ID)); err != nil {
					return err
				}
				continue
			}
			js, _ := json.Marshal(c.k)
			if err := txn.Set([]byte(pHash+c.hash), js); err != nil {
				return err
			}
		}
		return nil
	})
	return n, err
}

func hashToken(tok string) string {
	h := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(h[:])
}
