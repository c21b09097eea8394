package memosrt

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/memosrt/memosrt/internal/sealed"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/textmem"
)

// Cube archive: one tar file holding, in this order,
//
//	manifest.json       archiveManifest (format "memosrt-cube", version)
//	memories.jsonl      one textmem.Memory per line, canonical order
//	packs/<id>.mkvb     each KV pack blob of the cube (kvcache blob format,
//	                    self-describing and checksummed)
//
// Import stores the memories as they were (textmem.Store.Import: the same
// ids, creation and update times and versions, so clients' references stay
// valid and the cube's pack renders to the same tokens), stores each pack blob after checking it (packs computed for
// another model or KV layout are stored too but only ever match under their
// own config), and, with a model loaded, puts the memories that were in the
// activation tier (tier_members, pinned) back into it: their stored pack
// is found and nothing is decoded again.
const (
	archiveFormat  = "memosrt-cube"
	ArchiveVersion = 1
)

type archiveManifest struct {
	Format      string            `json:"format"`
	Version     int               `json:"version"`
	Cube        string            `json:"cube"`
	Description string            `json:"description,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	Created     time.Time         `json:"created"`
	Exported    time.Time         `json:"exported"`
	Memories    int               `json:"memories"`
	Packs       []archivePack     `json:"packs"`
	// TierMembers are the ids (as exported) of the memories in the cube's
	// activation tier, pack order; Pinned those of them pinned by a warm.
	TierMembers []string `json:"tier_members,omitempty"`
	Pinned      []string `json:"pinned,omitempty"`
	Resident    bool     `json:"resident,omitempty"`
}

type archivePack struct {
	ID      string `json:"id"`
	Label   string `json:"label"`
	NTokens int    `json:"n_tokens"`
	File    string `json:"file"`
}

// ExportCube writes cube as one archive (see the layout above) to w:
// memories, KV pack blobs and tier membership. With Options.EncryptionKey
// the archive is sealed (internal/sealed: AES-256-GCM records under a key
// derived from it), and only an OS opened with the same key imports it. Errors: ErrUnknownCube,
// storage errors, w's errors (part of the archive may have been written).
func (o *OS) ExportCube(ctx context.Context, cube string, w io.Writer) error {
	if err := o.enter(); err != nil {
		return err
	}
	defer o.leave()
	rec, err := o.cubes.get(ctx, cube)
	if err != nil {
		return err
	}
	mems, err := o.mem.List(ctx, cube)
	if err != nil {
		return err
	}
	members, pinned, resident, err := o.tiers.Membership(cube)
	if err != nil {
		return err
	}
	type blob struct {
		p archivePack
		b []byte
	}
	var blobs []blob
	for _, p := range o.cubePacks(cube) {
		b, err := o.kv.Blob(p.ID)
		if errors.Is(err, kvcache.ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return err
		}
		blobs = append(blobs, blob{archivePack{ID: p.ID, Label: p.Label, NTokens: p.NTokens, File: "packs/" + p.ID + ".mkvb"}, b})
	}
	man := archiveManifest{Format: archiveFormat, Version: ArchiveVersion, Cube: rec.Name, Description: rec.Description,
		Metadata: rec.Metadata, Created: rec.Created, Exported: o.opts.Clock.Now().UTC(), Memories: len(mems), Packs: []archivePack{},
		TierMembers: members, Pinned: pinned, Resident: resident}
	for _, b := range blobs {
		man.Packs = append(man.Packs, b.p)
	}
	var memBuf bytes.Buffer
	enc := json.NewEncoder(&memBuf)
	enc.SetEscapeHTML(false)
	for _, m := range mems {
		enc.Encode(m)
	}
	manJSON, _ := json.MarshalIndent(man, "", "  ")
	var sw *sealed.Writer
	if len(o.opts.EncryptionKey) > 0 {
		// encrypted at rest, encrypted in transit: the archive is sealed
		// under the data directory's key (internal/sealed)
		if sw, err = sealed.NewWriter(w, o.opts.EncryptionKey, archiveSealInfo); err != nil {
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
	err = put("manifest.json", manJSON)
	if err == nil {
		err = put("memories.jsonl", memBuf.Bytes())
	}
	for _, b := range blobs {
		if err != nil {
			break
		}
		err = put(b.p.File, b.b)
	}
	if err == nil {
		err = tw.Close()
	}
	if err == nil && sw != nil {
		err = sw.Close()
	}
	return err
}

// archiveSealInfo is the HKDF info of sealed cube archives.
const archiveSealInfo = "memosrt cube archive v1"

// ImportResult reports an ImportCube.
type ImportResult struct {
	Cube     string `json:"cube"`
	Memories int    `json:"memories"`
	Packs    int    `json:"packs"`
}

// ImportOptions tune ImportCube.
type ImportOptions struct {
	// Cube imports under this name instead of the archive's.
	Cube string
	// Replace replaces an existing cube of that name; otherwise that is
	// ErrCubeExists.
	Replace bool
}

// ImportCube reads a cube archive (ExportCube's) from r. A failed import
// leaves no part of the cube behind. Errors: ErrBadArchive (wrapping r's
// error when reading failed), ErrCubeExists, *FieldError for a bad name,
// storage errors.
func (o *OS) ImportCube(ctx context.Context, r io.Reader, opts ImportOptions) (ImportResult, error) {
	var res ImportResult
	if err := o.enter(); err != nil {
		return res, err
	}
	defer o.leave()
	br := bufio.NewReader(r)
	if head, _ := br.Peek(len(sealed.Magic)); sealed.IsSealed(head) {
		if len(o.opts.EncryptionKey) == 0 {
			return res, fmt.Errorf("%w: the archive is encrypted: import it into a data directory opened with the key it was exported under", ErrBadArchive)
		}
		sr, err := sealed.NewReader(br, o.opts.EncryptionKey, archiveSealInfo)
		if err != nil {
			return res, fmt.Errorf("%w: %w", ErrBadArchive, err)
		}
		r = sr
	} else {
		r = br
	}
	tr := tar.NewReader(r)
	next := func(want string) (*tar.Header, error) {
		h, err := tr.Next()
		if err == io.EOF {
			return nil, err
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadArchive, err)
		}
		if want != "" && h.Name != want {
			return nil, fmt.Errorf("%w: entry %q where %q belongs", ErrBadArchive, h.Name, want)
		}
		return h, nil
	}
	readAll := func(h *tar.Header, limit int64) ([]byte, error) {
		if h.Size > limit {
			return nil, fmt.Errorf("%w: %s is %d bytes", ErrBadArchive, h.Name, h.Size)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrBadArchive, h.Name, err)
		}
		return b, nil
	}
	h, err := next("manifest.json")
	if err == io.EOF {
		return res, fmt.Errorf("%w: empty archive", ErrBadArchive)
	}
	if err != nil {
		return res, err
	}
	mb, err := readAll(h, 64<<20)
	if err != nil {
		return res, err
	}
	var man archiveManifest
	if err := json.Unmarshal(mb, &man); err != nil {
		return res, fmt.Errorf("%w: manifest: %v", ErrBadArchive, err)
	}
	if man.Format != archiveFormat {
		return res, fmt.Errorf("%w: format %q, want %q", ErrBadArchive, man.Format, archiveFormat)
	}
	if man.Version != ArchiveVersion {
		return res, fmt.Errorf("%w: version %d (this build reads %d)", ErrBadArchive, man.Version, ArchiveVersion)
	}
	cube := man.Cube
	if opts.Cube != "" {
		cube = opts.Cube
	}
	if !textmem.ValidCube(cube) {
		return res, badField("cube", "%q is not a cube name", cube)
	}
	res.Cube = cube
	if ok, err := o.cubes.exists(ctx, cube); err != nil {
		return res, err
	} else if ok {
		if !opts.Replace {
			return res, fmt.Errorf("%w: %q (import with ImportOptions.Replace, or under another name with ImportOptions.Cube)", ErrCubeExists, cube)
		}
		if err := o.deleteCube(ctx, cube); err != nil {
			return res, err
		}
	}
	if _, err := o.cubes.create(ctx, cubeRecord{Name: cube, Description: man.Description, Metadata: man.Metadata}); err != nil {
		return res, err
	}
	ok := false
	imported := map[string]bool{}
	defer func() {
		if ok {
			return
		}
		// never leave half a cube: delete it, or, when it is gone already
		// (deleted on another node meanwhile), the memories stored here
		bg := context.WithoutCancel(ctx)
		if err := o.deleteCube(bg, cube); errors.Is(err, ErrUnknownCube) {
			for id := range imported {
				_ = o.mem.Delete(bg, cube, id)
			}
		}
	}()
	h, err = next("memories.jsonl")
	if err == io.EOF {
		return res, fmt.Errorf("%w: no memories.jsonl", ErrBadArchive)
	}
	if err != nil {
		return res, err
	}
	sc := bufio.NewScanner(tr)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var m textmem.Memory
		if err := json.Unmarshal(line, &m); err != nil {
			return res, fmt.Errorf("%w: memories.jsonl line %d: %v", ErrBadArchive, res.Memories+1, err)
		}
		got, err := o.mem.Import(ctx, cube, m)
		if errors.Is(err, textmem.ErrBadID) || errors.Is(err, textmem.ErrIDExists) {
			return res, fmt.Errorf("%w: memories.jsonl line %d: %v", ErrBadArchive, res.Memories+1, err)
		}
		if err != nil {
			return res, err
		}
		imported[got.ID] = true
		res.Memories++
	}
	if err := sc.Err(); err != nil {
		return res, fmt.Errorf("%w: memories.jsonl: %w", ErrBadArchive, err)
	}
	if res.Memories != man.Memories {
		return res, fmt.Errorf("%w: %d memories, manifest says %d", ErrBadArchive, res.Memories, man.Memories)
	}
	for {
		h, err := next("")
		if err == io.EOF {
			break
		}
		if err != nil {
			return res, err
		}
		if !strings.HasPrefix(h.Name, "packs/") {
			return res, fmt.Errorf("%w: unexpected entry %q", ErrBadArchive, h.Name)
		}
		blob, err := readAll(h, kvcache.MaxRawBytes)
		if err != nil {
			return res, err
		}
		hd, state, err := kvcache.Decode(blob)
		if err != nil {
			return res, fmt.Errorf("%w: %s: %w", ErrBadArchive, h.Name, err)
		}
		if strings.HasPrefix(hd.Label, convPrefix) {
			hd.Label = convLabel(cube)
		} else {
			hd.Label = cube
		}
		hd.Scope = cube // found by this cube's lookups only (never the exporter's)
		hd.Created = time.Time{}
		o.kvMu.Lock()
		_, err = o.kv.Put(ctx, hd, state)
		o.kvMu.Unlock()
		if err != nil {
			return res, err
		}
		res.Packs++
	}
	if o.models.Len() > 0 && len(man.TierMembers) > 0 {
		// the tier's packs are the primary's: loaded for them
		_, release, err := o.use(ctx, "", nil)
		if err != nil {
			return res, err
		}
		defer release()
		var ids, pins []string
		for _, id := range man.TierMembers {
			if imported[id] {
				ids = append(ids, id)
				if slices.Contains(man.Pinned, id) {
					pins = append(pins, id)
				}
			}
		}
		o.kvMu.Lock()
		_, err = o.tiers.Promote(ctx, cube, ids, "import", false, man.Resident)
		if err == nil && len(pins) > 0 {
			_, err = o.tiers.Promote(ctx, cube, pins, "import", true, man.Resident)
		}
		o.kvMu.Unlock()
		if err != nil {
			return res, err
		}
	}
	ok = true
	return res, nil
}
