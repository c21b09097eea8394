package textmem

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Memory is one plaintext memory of a cube.
type Memory struct {
	// ID is assigned by Add: 24 lower-case hex digits, the first 16 the
	// creation time in Unix nanoseconds (strictly increasing within a
	// Store), the last 8 random. IDs sort in creation order.
	ID   string `json:"id"`
	Cube string `json:"cube"`
	Text string `json:"text"`
	// Kind is free form: "fact", "preference", "dialog", ...
	Kind   string   `json:"kind,omitempty"`
	Tags   []string `json:"tags,omitempty"`
	Source string   `json:"source,omitempty"`
	// Created is when the memory was first stored, UTC.
	Created time.Time `json:"created"`
	// Updated is when the current version was stored, UTC.
	Updated time.Time `json:"updated"`
	// EventTime is when the remembered thing happened, UTC; zero if
	// unknown. It is independent of Created.
	EventTime time.Time `json:"event_time,omitzero"`
	// Version is 1 after Add and grows by one with each Update.
	Version int `json:"version"`
	// Confidence is how sure the writer was, in [0, 1] (an extraction's
	// confidence); 0 means unstated.
	Confidence float64 `json:"confidence,omitempty"`
	// Turns are the ids of the recorded chat turns the memory was
	// extracted from (package convmem), oldest first.
	Turns []string `json:"turns,omitempty"`
	// Expires is when the memory is deleted by the memory OS's sweep, UTC;
	// zero means never.
	Expires time.Time `json:"expires,omitzero"`
}

// Hit is one search result.
type Hit struct {
	Memory Memory `json:"memory"`
	// Score ranks hits, higher is better, within their tier (Query.LastKinds:
	// a hit of a kind ranked last comes after the others whatever its
	// Score). For a lexical search it is the BM25 score; its scale depends on
	// the Query (see Query).
	Score float64 `json:"score"`
}

// ValidCube reports whether c is a valid cube name: 1..64 characters of
// [A-Za-z0-9._-], and neither "." nor ".." (a name becomes a folder under
// the data directory, and those two would name the folder itself or its
// parent). The server and the LoRA registry (cube and adapter names) apply
// the same rule.
func ValidCube(c string) bool {
	if len(c) == 0 || len(c) > 64 || c == "." || c == ".." {
		return false
	}
	for i := 0; i < len(c); i++ {
		switch b := c[i]; {
		case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9', b == '.', b == '_', b == '-':
		default:
			return false
		}
	}
	return true
}

func checkCube(c string) error {
	if !ValidCube(c) {
		return fmt.Errorf("%w: %q", ErrBadCube, c)
	}
	return nil
}

// validID reports whether id has the shape Add assigns.
func validID(id string) bool {
	if len(id) != idLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if b := id[i]; !('0' <= b && b <= '9' || 'a' <= b && b <= 'f') {
			return false
		}
	}
	return true
}

const idLen = 24

func formatID(nanos uint64, rnd uint32) string {
	var b [12]byte
	binary.BigEndian.PutUint64(b[:8], nanos)
	binary.BigEndian.PutUint32(b[8:], rnd)
	return hex.EncodeToString(b[:])
}

// checkText validates a memory text against the size limit.
func checkText(text string, max int) error {
	if !utf8.ValidString(text) {
		return ErrInvalidUTF8
	}
	if strings.TrimSpace(text) == "" {
		return ErrEmptyText
	}
	if len(text) > max {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(text), max)
	}
	return nil
}

func checkMeta(m *Memory) error {
	if !utf8.ValidString(m.Kind) || !utf8.ValidString(m.Source) {
		return ErrInvalidUTF8
	}
	if m.Confidence < 0 || m.Confidence > 1 || m.Confidence != m.Confidence {
		return fmt.Errorf("%w: confidence %v outside [0, 1]", ErrBadField, m.Confidence)
	}
	for _, t := range m.Tags {
		if !utf8.ValidString(t) {
			return ErrInvalidUTF8
		}
	}
	return nil
}

// normalizeForHash folds case and collapses whitespace, so that texts that
// differ only in those are exact duplicates.
func normalizeForHash(text string) string {
	return strings.Join(strings.Fields(strings.ToLower(text)), " ")
}

// contentHash is the exact-duplicate key of a memory: SHA-256 of the
// normalised text and the event time (the same words about two different
// days are two memories), first 16 bytes in hex.
func contentHash(text string, event time.Time) string {
	h := sha256.New()
	h.Write([]byte(normalizeForHash(text)))
	if !event.IsZero() {
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], uint64(event.UnixNano()))
		h.Write([]byte{0})
		h.Write(b[:])
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}
