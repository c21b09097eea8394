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
// than memosrt.MaxCubes cubes, or a conflict; the key's denial.
func (s *Server) cubes(r *http.Request, field, opt string, list []string) (string, []string, error) {
	header := splitCubes(r.Header.Get(CubeHeader))
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
	names := header
	if len(names) == 0 || len(names) == 1 && len(list) > 1 && list[0] == names[0] {
		names = list // the header names the first cube alone: the list goes on
	} else if len(list) > 0 && !slices.Equal(list, header) {
		return "", nil, wire.BadField(field, "%q, but the %s header names %q (give one, or the same cubes in both)", strings.Join(list, ","), CubeHeader, strings.Join(header, ","))
	}
	names = distinct(names) // a cube named twice counts once
	if len(names) > memosrt.MaxCubes {
		return "", nil, wire.BadField(field, "%d cubes, at most %d", len(names), memosrt.MaxCubes)
	}
	for i, c := range names {
		if !textmem.ValidCube(c) {
			return "", nil, wire.BadField(field, "%q: %v", c, textmem.ErrBadCube)
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

// distinct returns names without repeats, each where first named.
func distinct(names []string) []string {
	var out []string
	for _, c := range names {
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// splitCubes splits a comma-separated list of cube names, spaces around
// each trimmed, empty names left out.
func splitCubes(v string) []string {
	var out []string
	for _, c := range strings.Split(v, ",") {
		if c = strings.TrimSpace(c); c != "" {
			out = append(out, c)
		}
	}
	return out
}

// cubeListOf reads a cubes field that is an array of names or one string
// of names joined by commas (OpenAI's metadata values are strings).
func cubeListOf(field string, v any) ([]string, error) {
	if s, ok := v.(string); ok {
		return splitCubes(s), nil
	}
	return stringList(field, v)
}
