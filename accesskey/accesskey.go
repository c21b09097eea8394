package accesskey

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	bg "github.com/dgraph-io/badger/v4"

	"github.com/memosrt/memosrt/datadir"
)

// dbPrefix is the key prefix of access keys: srv/key/<sha256 hex of the
// token> → Key JSON. Only the hash is stored.
const dbPrefix = "srv/key/"

// TokenPrefix starts every token (tells them apart in logs).
const TokenPrefix = "msk_"

// ErrUnknown is returned by Lookup for a token that is no access key.
var ErrUnknown = errors.New("memosrt: unknown access key")

// Key is a bearer token's record: the one cube it may use.
type Key struct {
	ID      string    `json:"id"` // first 12 hex digits of the token's SHA-256
	Cube    string    `json:"cube"`
	Created time.Time `json:"created"`
	// CubeCreated is the creation time of the cube the key was minted
	// for: a cube deleted and created again under the same name (on
	// another node sharing the text store, unheard here) is another cube,
	// and the key no longer opens it. Zero in keys minted before it.
	CubeCreated time.Time `json:"cube_created,omitzero"`
}

// Store is the access keys of one data directory.
type Store struct {
	db *datadir.DB
}

// New returns the store of db. It does not own db.
func New(db *datadir.DB) *Store { return &Store{db: db} }

// Create stores a new key for cube, made at now, for the cube created at
// cubeCreated, and returns it with its token (32 random bytes, hex, after
// TokenPrefix). Errors: datadir.ErrNoSpace, storage errors.
func (s *Store) Create(cube string, cubeCreated, now time.Time) (Key, string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return Key{}, "", err
	}
	tok := TokenPrefix + hex.EncodeToString(b[:])
	h := hashToken(tok)
	k := Key{ID: h[:12], Cube: cube, Created: now.UTC(), CubeCreated: cubeCreated}
	js, _ := json.Marshal(k)
	err := s.db.Write(int64(len(js)), func(txn *bg.Txn) error { return txn.Set([]byte(dbPrefix+h), js) })
	if err != nil {
		return Key{}, "", fmt.Errorf("memosrt: store access key: %w", err)
	}
	return k, tok, nil
}

// Lookup returns the key of token; ErrUnknown when there is none. It does
// not check that the key's cube still exists.
func (s *Store) Lookup(token string) (Key, error) {
	if !strings.HasPrefix(token, TokenPrefix) {
		return Key{}, ErrUnknown
	}
	var k Key
	err := s.db.View(func(txn *bg.Txn) error {
		it, err := txn.Get([]byte(dbPrefix + hashToken(token)))
		if err != nil {
			return err
		}
		return it.Value(func(v []byte) error { return json.Unmarshal(v, &k) })
	})
	if errors.Is(err, bg.ErrKeyNotFound) {
		return Key{}, ErrUnknown
	}
	return k, err
}

// Revoke deletes token's key (none: nothing happens).
func (s *Store) Revoke(token string) error {
	return s.db.Update(func(txn *bg.Txn) error { return txn.Delete([]byte(dbPrefix + hashToken(token))) })
}

// each calls fn with every key and its Badger key.
func (s *Store) each(fn func(dbKey []byte, k Key)) error {
	return s.db.View(func(txn *bg.Txn) error {
		it := txn.NewIterator(bg.IteratorOptions{Prefix: []byte(dbPrefix), PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			var k Key
			if err := it.Item().Value(func(v []byte) error { return json.Unmarshal(v, &k) }); err != nil {
				return err
			}
			fn(it.Item().KeyCopy(nil), k)
		}
		return nil
	})
}

// Cubes returns the cubes that have keys, each once.
func (s *Store) Cubes() ([]string, error) {
	var out []string
	err := s.each(func(_ []byte, k Key) {
		if !slices.Contains(out, k.Cube) {
			out = append(out, k.Cube)
		}
	})
	return out, err
}

// DeleteCube revokes every key of cube (its cube is deleted).
func (s *Store) DeleteCube(cube string) error {
	var del [][]byte
	err := s.each(func(dbKey []byte, k Key) {
		if k.Cube == cube {
			del = append(del, dbKey)
		}
	})
	if err != nil || len(del) == 0 {
		return err
	}
	return s.db.Update(func(txn *bg.Txn) error {
		for _, k := range del {
			if err := txn.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
}

func hashToken(tok string) string {
	h := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(h[:])
}
