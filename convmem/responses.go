package convmem

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/memosrt/memosrt/textmem"
)

// MaxResponses is how many responses a cube's response log keeps
// (PutResponse), the oldest dropped first. Feedback refers to a recent
// answer, given while its conversation goes on: 256 covers many turns of
// a few conversations on one cube, and each record is small (its memory
// ids), so a cube's log stays within some tens of KiB.
const MaxResponses = 256

// ResponseRecord is one answer's entry in its cube's response log: what
// feedback on it (by ID) needs to find the memories the answer used.
type ResponseRecord struct {
	// ID is the response's id as its Response carried it ("resp_" then
	// 16 hex digits of Unix ns and 8 random: ids sort by time).
	ID   string `json:"id"`
	Cube string `json:"cube"`
	// Model is the model that answered.
	Model string `json:"model,omitempty"`
	// Chat is true for a chat turn, false for a completion.
	Chat bool `json:"chat"`
	// User is the last user message (chat) or the prompt (completion), at
	// most 1 KiB.
	User string `json:"user,omitempty"`
	// PackIDs, RetrievedIDs and PreferenceIDs are the memories the prompt
	// carried: in the cube's pack, retrieved for the last user turn, and
	// in the preference block (textmem ids, in prompt order).
	PackIDs       []string  `json:"pack_memory_ids"`
	RetrievedIDs  []string  `json:"retrieved_memory_ids"`
	PreferenceIDs []string  `json:"preference_memory_ids,omitempty"`
	Time          time.Time `json:"time"`
	// Rated is set once feedback rated the answer (a rating, stars, or a
	// correction's implied -1): an answer is rated once.
	Rated bool `json:"rated,omitempty"`
}

// Used returns every memory id r's prompt carried, without repeats:
// retrieved first (they answered this question), then preferences, then
// the pack.
func (r ResponseRecord) Used() []string {
	var out []string
	for _, l := range [][]string{r.RetrievedIDs, r.PreferenceIDs, r.PackIDs} {
		for _, id := range l {
			if !slices.Contains(out, id) {
				out = append(out, id)
			}
		}
	}
	return out
}

// PutResponse appends r (its ID and Cube set) to its cube's response log
// and drops the oldest beyond MaxResponses, in one transaction.
func (s *Store) PutResponse(ctx context.Context, r ResponseRecord) error {
	if r.ID == "" || r.Cube == "" {
		return errors.New("convmem: a response without id or cube")
	}
	if len(r.User) > 1024 {
		r.User = truncUTF8(r.User, 1024)
	}
	return s.be.Update(ctx, r.Cube, func(txn textmem.Txn) error {
		if err := setJSON(txn, pResp+r.ID, r); err != nil {
			return err
		}
		ids, err := idsUnder(txn, pResp)
		if err != nil {
			return err
		}
		for _, id := range ids[:max(0, len(ids)-MaxResponses)] {
			if err := txn.Delete([]byte(pResp + id)); err != nil {
				return err
			}
		}
		return nil
	})
}

// Response returns response id of cube's log; with id "", its latest.
// ErrNotFound if the log holds no such response (never recorded, or
// dropped as one of the oldest).
func (s *Store) Response(ctx context.Context, cube, id string) (ResponseRecord, error) {
	var r ResponseRecord
	err := s.be.View(ctx, cube, func(txn textmem.Txn) error {
		if id == "" {
			ids, err := idsUnder(txn, pResp)
			if err != nil {
				return err
			}
			if len(ids) == 0 {
				return ErrNotFound
			}
			id = ids[len(ids)-1]
		}
		return getJSON(txn, pResp+id, &r)
	})
	return r, err
}

// Responses returns cube's response log, oldest first.
func (s *Store) Responses(ctx context.Context, cube string) ([]ResponseRecord, error) {
	var out []ResponseRecord
	err := s.be.View(ctx, cube, func(txn textmem.Txn) (err error) {
		out, err = scan[ResponseRecord](txn, pResp)
		return err
	})
	return out, err
}
