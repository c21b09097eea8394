package server

import (
	"net/http"
	"slices"
	"strings"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/server/wire"
	"github.com/memosrt/memosrt/textmem"
)

// cubes returns the cubes of a generation naming several: the first, which
// the turn writes to, and the others, which it reads (memosrt.Request.Cube
// and ReadCubes). They come from the X-Memosrt-Cube header (names joined
// by commas), else list (the body's cubes: native cubes, OpenAI's
// metadata.cubes, Ollama's options.cubes; field names it), whose first
// must be opt when opt (the body's cube) is given too. A header and a list
// naming different cubes are refused, except a header naming the list's
// first cube alone (a client's default header). A cube named twice counts
// once (the first naming kept). With one cube or none it is cube
// (s.cube). An access key needs write on the first cube and read on the
// others (403 otherwise). Errors: *FieldError (400) for a bad name, more
// than memosrt.MaxCubes cubes, an empty name (in the header: naming the
// header), or a conflict; the key's denial.
func (s *Server) cubes(r *http.Request, field, opt string, list []string) (string, []string, error) {
	header := splitCubes(r.Header.Get(CubeHeader))
	if i := slices.Index(header, ""); i >= 0 {
		return "", nil, wire.BadField(CubeHeader, "cube %d of %q is empty (names joined by commas)", i+1, r.Header.Get(CubeHeader))
	}
	if i := slices.Index(list, ""); i >= 0 {
		return "", nil, wire.BadField(field, "cube %d is empty", i+1)
	}
	if opt != "" && len(list) > 0 && list[0] != opt {
		return "", nil, wire.BadField(field, "the first cube is %q, but cube names %q (the first cube is the one written to)", list[0], opt)
	}
	if len(header) <= 1 && len(list) <= 1 {
		if len(list) == 1 {
			opt = list[0]
		}
		c, err := s.cube(r, opt)
		return c, nil, err
	}
	names, from := header, CubeHeader // from: what errors about names name
	if len(names) == 0 || len(names) == 1 && len(list) > 1 && list[0] == names[0] {
		names, from = list, field // the header names the first cube alone: the list goes on
	} else if len(list) > 0 && !slices.Equal(list, header) {
		return "", nil, wire.BadField(field, "%q, but the %s header names %q (give one, or the same cubes in both)", strings.Join(list, ","), CubeHeader, strings.Join(header, ","))
	}
	names = wire.Distinct(names) // a cube named twice counts once
	if len(names) > memosrt.MaxCubes {
		return "", nil, wire.BadField(from, "%d cubes, at most %d", len(names), memosrt.MaxCubes)
	}
	for i, c := range names {
		if !textmem.ValidCube(c) {
			return "", nil, wire.BadField(from, "%q: %v", c, textmem.ErrBadCube)
		}
		need := memosrt.KeyRead
		if i == 0 {
			need = memosrt.KeyWrite // the cube written to
		}
		if err := wire.Allow(r.Context(), s.os, c, need); err != nil {
			return "", nil, err
		}
	}
	return names[0], names[1:], nil
}

// splitCubes splits a comma-separated list of cube names, spaces around
// each trimmed; an empty name stays, as "" (the callers refuse it); a
// blank v is no names.
func splitCubes(v string) []string {
	if strings.TrimSpace(v) == "" {
		return nil
	}
	out := strings.Split(v, ",")
	for i, c := range out {
		out[i] = strings.TrimSpace(c)
	}
	return out
}

// cubeListOf reads a cubes field that is an array of names or one string
// of names joined by commas (OpenAI's metadata values are strings); an
// empty string is one empty name.
func cubeListOf(field string, v any) ([]string, error) {
	if s, ok := v.(string); ok {
		if strings.TrimSpace(s) == "" {
			return []string{""}, nil
		}
		return splitCubes(s), nil
	}
	return stringList(field, v)
}
