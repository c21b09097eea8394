package cubearchive

import (
	"archive/tar"
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/memosrt/memosrt/errkind"
	"github.com/memosrt/memosrt/internal/sealed"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/textmem"
)

const (
	// Format is the manifest's format field.
	Format = "memosrt-cube"
	// Version is the manifest version this build writes and the only one
	// it reads.
	Version = 1

	// MaxManifestBytes bounds manifest.json.
	MaxManifestBytes = 64 << 20
	// MaxMemoryBytes bounds one line of memories.jsonl.
	MaxMemoryBytes = 16 << 20
	// MaxPackBytes bounds one pack blob: no valid blob is larger than the
	// state it decodes to.
	MaxPackBytes = kvcache.MaxRawBytes

	// sealInfo is the HKDF info of sealed archives.
	sealInfo = "memosrt cube archive v1"

	manifestName = "manifest.json"
	memoriesName = "memories.jsonl"
	packsDir     = "packs/"
)

var (
	// ErrBad is wrapped by every error that says the input is not a cube
	// archive this build reads. Its text is the facade's, whose
	// ErrBadArchive it is.
	ErrBad = errkind.New(errkind.Invalid, "memosrt: bad cube archive")
	// ErrNeedKey is returned by NewReader for a sealed archive given no key.
	ErrNeedKey = fmt.Errorf("%w: the archive is encrypted", ErrBad)
)

// Manifest is manifest.json: what the archive holds.
type Manifest struct {
	// Format and Version are set by Write (Format, Version).
	Format  string `json:"format"`
	Version int    `json:"version"`
	// Cube, Description, Metadata and Created are the cube's record.
	Cube        string            `json:"cube"`
	Description string            `json:"description,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	// Assistant is the record's mark of an assistant's cube.
	Assistant bool      `json:"assistant,omitempty"`
	Created   time.Time `json:"created"`
	// Exported is when the archive was written; it is also every entry's
	// modification time.
	Exported time.Time `json:"exported"`
	// Memories is the number of memories (set by Write); a Reader refuses
	// an archive holding another number.
	Memories int `json:"memories"`
	// Packs are the KV packs, in entry order.
	Packs []Pack `json:"packs"`
	// TierMembers are the ids of the memories in the cube's activation
	// tier, pack order; Pinned those of them pinned by a warm; Resident
	// whether the cube's pack was kept in the KV cache.
	TierMembers []string `json:"tier_members,omitempty"`
	Pinned      []string `json:"pinned,omitempty"`
	Resident    bool     `json:"resident,omitempty"`
}

// Pack is the manifest's entry of one KV pack.
type Pack struct {
	ID      string `json:"id"`
	Label   string `json:"label"`
	NTokens int    `json:"n_tokens"`
	// File is the pack's entry name, PackFile(ID) (set by Write).
	File string `json:"file"`
}

// PackFile is the entry name of pack id's blob: packs/<id>.mkvb.
func PackFile(id string) string { return packsDir + id + ".mkvb" }

// Write writes the archive of man, mems and blobs to w, blobs[i] being the
// blob of man.Packs[i]; it sets man's Format, Version, Memories and each
// pack's File. With a non-empty key the archive is sealed under it. Errors:
// a blob count unlike the pack count, a pack id that is empty or holds a
// '/', w's errors (part of the archive may have been written then).
func Write(w io.Writer, key []byte, man Manifest, mems []textmem.Memory, blobs [][]byte) error {
	if len(blobs) != len(man.Packs) {
		return fmt.Errorf("cubearchive: %d blobs for %d packs", len(blobs), len(man.Packs))
	}
	man.Format, man.Version, man.Memories = Format, Version, len(mems)
	man.Packs = append([]Pack{}, man.Packs...) // the caller's slice is left as it was; never null in JSON
	for i := range man.Packs {
		id := man.Packs[i].ID
		if id == "" || strings.Contains(id, "/") {
			return fmt.Errorf("cubearchive: pack id %q", id)
		}
		man.Packs[i].File = PackFile(id)
	}
	var memBuf bytes.Buffer
	enc := json.NewEncoder(&memBuf)
	enc.SetEscapeHTML(false)
	for _, m := range mems {
		if err := enc.Encode(m); err != nil {
			return err
		}
	}
	manJSON, err := json.MarshalIndent(man, "", "  ")
	if err != nil {
		return err
	}
	var sw *sealed.Writer
	if len(key) > 0 {
		if sw, err = sealed.NewWriter(w, key, sealInfo); err != nil {
			return err
		}
		w = sw
	}
	tw := tar.NewWriter(w)
	put := func(name string, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), ModTime: man.Exported, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	if err := put(manifestName, manJSON); err != nil {
		return err
	}
	if err := put(memoriesName, memBuf.Bytes()); err != nil {
		return err
	}
	for i, b := range blobs {
		if err := put(man.Packs[i].File, b); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if sw != nil {
		return sw.Close()
	}
	return nil
}

// Reader reads an archive in its order: NewReader reads the manifest,
// NextMemory yields the memories, then NextPack the pack blobs. After an
// error every later call returns it again.
type Reader struct {
	tr   *tar.Reader
	man  Manifest
	sc   *bufio.Scanner // memories.jsonl, once its entry is open
	n    int            // memories read
	done bool           // NextMemory returned io.EOF
	err  error
}

// NewReader opens the archive r (sealed or plain; a sealed one under key)
// and reads its manifest. Errors: ErrNeedKey for a sealed archive and an
// empty key; otherwise wrapping ErrBad: an empty stream, a first entry
// that is not manifest.json, a manifest over MaxManifestBytes or not JSON,
// a format other than Format or a version other than Version, a sealed
// stream that does not open under key (wrapping sealed.ErrOpen), r's
// errors.
func NewReader(r io.Reader, key []byte) (*Reader, error) {
	br := bufio.NewReader(r)
	if head, _ := br.Peek(len(sealed.Magic)); sealed.IsSealed(head) {
		if len(key) == 0 {
			return nil, ErrNeedKey
		}
		sr, err := sealed.NewReader(br, key, sealInfo)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBad, err)
		}
		r = sr
	} else {
		r = br
	}
	ar := &Reader{tr: tar.NewReader(r)}
	h, err := ar.next(manifestName)
	if err == io.EOF {
		return nil, fmt.Errorf("%w: empty archive", ErrBad)
	}
	if err != nil {
		return nil, err
	}
	b, err := ar.readAll(h, MaxManifestBytes)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &ar.man); err != nil {
		return nil, fmt.Errorf("%w: manifest: %v", ErrBad, err)
	}
	if ar.man.Format != Format {
		return nil, fmt.Errorf("%w: format %q, want %q", ErrBad, ar.man.Format, Format)
	}
	if ar.man.Version != Version {
		return nil, fmt.Errorf("%w: version %d (this build reads %d)", ErrBad, ar.man.Version, Version)
	}
	return ar, nil
}

// Manifest returns the archive's manifest.
func (r *Reader) Manifest() Manifest { return r.man }

// NextMemory returns the next memory of memories.jsonl (blank lines are
// skipped), and io.EOF after the last. Errors wrapping ErrBad: no
// memories.jsonl entry after the manifest, a line over MaxMemoryBytes or
// not a memory's JSON (the message names the line by its memory number),
// a memory count unlike the manifest's (at the end), a truncated or
// altered stream.
func (r *Reader) NextMemory() (textmem.Memory, error) {
	var m textmem.Memory
	if r.err != nil {
		return m, r.err
	}
	if r.done {
		return m, io.EOF
	}
	if r.sc == nil {
		_, err := r.next(memoriesName)
		if err == io.EOF {
			err = fmt.Errorf("%w: no %s", ErrBad, memoriesName)
		}
		if err != nil {
			return m, r.fail(err)
		}
		r.sc = bufio.NewScanner(r.tr)
		r.sc.Buffer(make([]byte, 0, 64<<10), MaxMemoryBytes)
	}
	for r.sc.Scan() {
		line := bytes.TrimSpace(r.sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if err := json.Unmarshal(line, &m); err != nil {
			return textmem.Memory{}, r.fail(fmt.Errorf("%w: %s line %d: %v", ErrBad, memoriesName, r.n+1, err))
		}
		r.n++
		return m, nil
	}
	if err := r.sc.Err(); err != nil {
		return m, r.fail(fmt.Errorf("%w: %s: %w", ErrBad, memoriesName, err))
	}
	if r.n != r.man.Memories {
		return m, r.fail(fmt.Errorf("%w: %d memories, manifest says %d", ErrBad, r.n, r.man.Memories))
	}
	r.done = true
	return m, io.EOF
}

// errPacksEarly is NextPack's error before the memories were read to
// their end: a caller's mistake, not a bad archive.
var errPacksEarly = errors.New("cubearchive: NextPack before NextMemory returned io.EOF")

// NextPack returns the next pack's entry name and blob, and io.EOF after
// the last. Call it once NextMemory has returned io.EOF. Errors wrapping
// ErrBad: an entry outside packs/, a blob over MaxPackBytes, a truncated
// or altered stream.
func (r *Reader) NextPack() (name string, blob []byte, err error) {
	if r.err != nil {
		return "", nil, r.err
	}
	if !r.done {
		return "", nil, errPacksEarly
	}
	h, err := r.next("")
	if err == io.EOF {
		return "", nil, io.EOF
	}
	if err == nil && !strings.HasPrefix(h.Name, packsDir) {
		err = fmt.Errorf("%w: unexpected entry %q", ErrBad, h.Name)
	}
	if err == nil {
		blob, err = r.readAll(h, MaxPackBytes)
	}
	if err != nil {
		return "", nil, r.fail(err)
	}
	return h.Name, blob, nil
}

func (r *Reader) fail(err error) error {
	r.err = err
	return err
}

// next opens the next entry, which must be named want unless want is "";
// io.EOF at the end of the archive.
func (r *Reader) next(want string) (*tar.Header, error) {
	h, err := r.tr.Next()
	if err == io.EOF {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBad, err)
	}
	if want != "" && h.Name != want {
		return nil, fmt.Errorf("%w: entry %q where %q belongs", ErrBad, h.Name, want)
	}
	return h, nil
}

func (r *Reader) readAll(h *tar.Header, limit int64) ([]byte, error) {
	if h.Size > limit {
		return nil, fmt.Errorf("%w: %s is %d bytes", ErrBad, h.Name, h.Size)
	}
	b, err := io.ReadAll(r.tr)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBad, h.Name, err)
	}
	return b, nil
}
