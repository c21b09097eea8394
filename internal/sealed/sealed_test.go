package sealed

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"testing"
)

func seal(t *testing.T, key, data []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	w, err := NewWriter(&out, key, "test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func open(key, s []byte) ([]byte, error) {
	r, err := NewReader(bytes.NewReader(s), key, "test")
	if err != nil {
		return nil, err
	}
	return io.ReadAll(r)
}

// Byte-exact round trips at the record edges; the plaintext never shows;
// a wrong key, a flipped bit, a dropped or swapped record and every
// truncation fail with ErrOpen.
func TestRoundTripAndTamper(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	for _, n := range []int{0, 1, RecordSize - 1, RecordSize, RecordSize + 1, 3*RecordSize + 5} {
		data := make([]byte, n)
		rand.Read(data)
		s := seal(t, key, data)
		got, err := open(key, s)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%d bytes: %v, %d back", n, err, len(got))
		}
		if n >= 16 && bytes.Contains(s, data[:16]) {
			t.Fatalf("%d bytes: plaintext visible", n)
		}
	}
	data := bytes.Repeat([]byte("memosrt cube archive "), 10000) // ~3 records
	s := seal(t, key, data)
	if _, err := open(bytes.Repeat([]byte{8}, 32), s); !errors.Is(err, ErrOpen) {
		t.Fatalf("wrong key: %v", err)
	}
	for _, i := range []int{len(Magic) + 3, len(Magic) + 7 + 2, len(Magic) + 7 + 4 + 100, len(s) - 1} {
		b := bytes.Clone(s)
		b[i] ^= 1
		if _, err := open(key, b); !errors.Is(err, ErrOpen) {
			t.Fatalf("bit flipped at %d: %v", i, err)
		}
	}
	rec := 4 + RecordSize + 16
	hdr := len(Magic) + 7
	dropped := append(bytes.Clone(s[:hdr]), s[hdr+rec:]...)
	swapped := append(append(bytes.Clone(s[:hdr]), s[hdr+rec:hdr+2*rec]...), append(bytes.Clone(s[hdr:hdr+rec]), s[hdr+2*rec:]...)...)
	for name, b := range map[string][]byte{"dropped": dropped, "swapped": swapped} {
		if _, err := open(key, b); !errors.Is(err, ErrOpen) {
			t.Fatalf("record %s: %v", name, err)
		}
	}
	for cut := 0; cut < len(s); cut += 997 {
		if _, err := open(key, s[:cut]); !errors.Is(err, ErrOpen) {
			t.Fatalf("truncated to %d: %v", cut, err)
		}
	}
}
