package sealed

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Magic starts every sealed stream.
const Magic = "MSRTSEAL"

// RecordSize is the plaintext bytes of a full record.
const RecordSize = 64 << 10

// ErrOpen is returned for a stream that does not open under the key: wrong
// key, altered, reordered or truncated.
var ErrOpen = errors.New("sealed: stream does not open under this key (wrong key, altered or truncated)")

func aead(key []byte, info string) (cipher.AEAD, error) {
	k, err := hkdf.Key(sha256.New, key, nil, info, 32)
	if err != nil {
		return nil, err
	}
	b, err := aes.NewCipher(k)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

func nonce(prefix []byte, n uint32, last bool) []byte {
	nc := make([]byte, 12)
	copy(nc, prefix)
	binary.BigEndian.PutUint32(nc[7:], n)
	if last {
		nc[11] = 1
	}
	return nc
}

// Writer seals what is written to it; Close writes the last record (it
// does not close the underlying writer).
type Writer struct {
	w      io.Writer
	a      cipher.AEAD
	prefix []byte
	n      uint32
	buf    []byte
	closed bool
}

// NewWriter starts a sealed stream on w under key, for purpose info.
func NewWriter(w io.Writer, key []byte, info string) (*Writer, error) {
	a, err := aead(key, info)
	if err != nil {
		return nil, err
	}
	prefix := make([]byte, 7)
	if _, err := rand.Read(prefix); err != nil {
		return nil, err
	}
	if _, err := io.WriteString(w, Magic); err != nil {
		return nil, err
	}
	if _, err := w.Write(prefix); err != nil {
		return nil, err
	}
	return &Writer{w: w, a: a, prefix: prefix, buf: make([]byte, 0, RecordSize)}, nil
}

func (s *Writer) record(last bool) error {
	if s.n == 1<<31-1 {
		return errors.New("sealed: stream too long")
	}
	ct := s.a.Seal(nil, nonce(s.prefix, s.n, last), s.buf, nil)
	s.n++
	h := uint32(len(ct))
	if last {
		h |= 1 << 31
	}
	var hb [4]byte
	binary.BigEndian.PutUint32(hb[:], h)
	if _, err := s.w.Write(hb[:]); err != nil {
		return err
	}
	_, err := s.w.Write(ct)
	s.buf = s.buf[:0]
	return err
}

// Write implements io.Writer.
func (s *Writer) Write(p []byte) (int, error) {
	if s.closed {
		return 0, errors.New("sealed: write after Close")
	}
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), RecordSize-len(s.buf))
		s.buf = append(s.buf, p[:k]...)
		p = p[k:]
		if len(s.buf) == RecordSize {
			if err := s.record(false); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

// Close writes the last record. Idempotent.
func (s *Writer) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	return s.record(true)
}

// IsSealed reports whether head (the first bytes of a stream, at least
// len(Magic)) starts a sealed stream.
func IsSealed(head []byte) bool { return bytes.HasPrefix(head, []byte(Magic)) }

// Reader opens a sealed stream; reading past the last record gives io.EOF,
// anything else wrong gives ErrOpen.
type Reader struct {
	r      io.Reader
	a      cipher.AEAD
	prefix []byte
	n      uint32
	buf    []byte
	done   bool
}

// NewReader opens the sealed stream r (magic included) under key and info.
func NewReader(r io.Reader, key []byte, info string) (*Reader, error) {
	a, err := aead(key, info)
	if err != nil {
		return nil, err
	}
	head := make([]byte, len(Magic)+7)
	if _, err := io.ReadFull(r, head); err != nil || !IsSealed(head) {
		return nil, fmt.Errorf("%w: no sealed header", ErrOpen)
	}
	return &Reader{r: r, a: a, prefix: head[len(Magic):]}, nil
}

func (s *Reader) next() error {
	var hb [4]byte
	if _, err := io.ReadFull(s.r, hb[:]); err != nil {
		return fmt.Errorf("%w: truncated", ErrOpen)
	}
	h := binary.BigEndian.Uint32(hb[:])
	last, size := h&(1<<31) != 0, int(h&^(1<<31))
	if size < s.a.Overhead() || size > RecordSize+s.a.Overhead() {
		return fmt.Errorf("%w: record of %d bytes", ErrOpen, size)
	}
	ct := make([]byte, size)
	if _, err := io.ReadFull(s.r, ct); err != nil {
		return fmt.Errorf("%w: truncated", ErrOpen)
	}
	pt, err := s.a.Open(ct[:0], nonce(s.prefix, s.n, last), ct, nil)
	if err != nil {
		return ErrOpen
	}
	s.n++
	s.buf, s.done = pt, last
	return nil
}

// Read implements io.Reader.
func (s *Reader) Read(p []byte) (int, error) {
	for len(s.buf) == 0 {
		if s.done {
			return 0, io.EOF
		}
		if err := s.next(); err != nil {
			return 0, err
		}
	}
	n := copy(p, s.buf)
	s.buf = s.buf[n:]
	return n, nil
}
