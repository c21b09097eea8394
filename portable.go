package server

import (
	"archive/tar"
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

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
// Import adds the memories in file order (new ids, new creation times in the
// same order, so the cube's pack renders to the same tokens and its packs
// stay valid) and stores each pack blob after checking it; packs computed
// for another model or KV layout are stored too but only ever match under
// their own config.
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
}

type archivePack struct {
	ID      string `json:"id"`
	Label   string `json:"label"`
	NTokens int    `json:"n_tokens"`
	File    string `json:"file"`
}

func (s *Server) handleCubeExport(w http.ResponseWriter, r *http.Request) {
	rec, err := s.pathCube(r)
	var mems []textmem.Memory
	if err == nil {
		mems, err = s.opts.Store.List(r.Context(), rec.Name)
	}
	type blob struct {
		p archivePack
		b []byte
	}
	var blobs []blob
	for _, p := range s.packsOf(rec.Name) {
		if err != nil {
			break
		}
		var b []byte
		b, err = s.opts.KV.Blob(p.ID)
		if errors.Is(err, kvcache.ErrNotFound) {
			err = nil // deleted meanwhile
			continue
		}
		blobs = append(blobs, blob{archivePack{ID: p.ID, Label: p.Label, NTokens: p.NTokens, File: "packs/" + p.ID + ".mkvb"}, b})
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	man := archiveManifest{Format: archiveFormat, Version: ArchiveVersion, Cube: rec.Name, Description: rec.Description,
		Metadata: rec.Metadata, Created: rec.Created, Exported: s.opts.Now().UTC(), Memories: len(mems), Packs: []archivePack{}}
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
	w.Header().Set("Content-Type", "application/x-tar")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s.memosrt.tar"`, rec.Name))
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
	if err != nil {
		s.log.Warn("export failed mid-stream", "cube", rec.Name, "err", err)
	}
}

type importResult struct {
	Cube     string `json:"cube"`
	Memories int    `json:"memories"`
	Packs    int    `json:"packs"`
}

// handleCubeImport reads a cube archive. ?cube=NAME imports under another
// name; ?replace=true replaces an existing cube of that name (else 409).
func (s *Server) handleCubeImport(w http.ResponseWriter, r *http.Request) {
	res, err := s.importCube(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, res)
}

func (s *Server) importCube(r *http.Request) (importResult, error) {
	var res importResult
	ctx := r.Context()
	tr := tar.NewReader(r.Body)
	next := func(want string) (*tar.Header, error) {
		h, err := tr.Next()
		if err == io.EOF {
			return nil, err
		}
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return nil, err
			}
			return nil, fmt.Errorf("%w: %v", ErrBadArchive, err)
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
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, err
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrBadArchive, h.Name, err)
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
	if c := r.URL.Query().Get("cube"); c != "" {
		cube = c
	}
	if !textmem.ValidCube(cube) {
		return res, badField("cube", "%q is not a cube name", cube)
	}
	res.Cube = cube
	if ok, err := s.cubes.exists(ctx, cube); err != nil {
		return res, err
	} else if ok {
		if r.URL.Query().Get("replace") != "true" {
			return res, fmt.Errorf("%w: %q (import with ?replace=true or ?cube=OTHER)", ErrCubeExists, cube)
		}
		if err := s.deleteCube(ctx, cube); err != nil {
			return res, err
		}
	}
	if _, err := s.cubes.create(ctx, cubeRecord{Name: cube, Description: man.Description, Metadata: man.Metadata}); err != nil {
		return res, err
	}
	ok := false
	defer func() {
		if !ok {
			s.deleteCube(ctx, cube) // never leave half a cube
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
		if _, err := s.opts.Store.Add(ctx, cube, textmem.Memory{Text: m.Text, Kind: m.Kind, Tags: m.Tags, Source: m.Source, EventTime: m.EventTime}); err != nil {
			return res, err
		}
		res.Memories++
	}
	if err := sc.Err(); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return res, err
		}
		return res, fmt.Errorf("%w: memories.jsonl: %v", ErrBadArchive, err)
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
		if s.opts.KV == nil {
			continue
		}
		hd, state, err := kvcache.Decode(blob)
		if err != nil {
			return res, fmt.Errorf("%w: %s: %w", ErrBadArchive, h.Name, err)
		}
		if strings.HasPrefix(hd.Label, "conv:") {
			hd.Label = "conv:" + cube
		} else {
			hd.Label = cube
		}
		hd.Created = time.Time{}
		unlock := s.lockPacks()
		_, err = s.opts.KV.Put(ctx, hd, state)
		unlock()
		if err != nil {
			return res, err
		}
		res.Packs++
	}
	ok = true
	return res, nil
}
