package server

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/memosrt/memosrt/server/wire"
)

// probedMethods are the methods notFound tries on a path, in the order
// the Allow header lists them.
var probedMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// notFound answers a request only the catch-all "/" pattern matched. The
// catch-all hides ServeMux's own 405 (a path with a pattern for another
// method falls to "/"), so the methods of mux's other patterns for the path
// are looked up here: any is a 405 with an Allow header listing them
// (RFC 9110, section 15.5.6), none a 404.
func (s *Server) notFound(mux *http.ServeMux, w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range probedMethods {
		if m == r.Method {
			continue
		}
		probe := *r
		probe.Method = m
		if _, pat := mux.Handler(&probe); pat != "" && pat != "/" {
			allow = append(allow, m)
		}
	}
	if len(allow) == 0 {
		s.writeError(w, r, fmt.Errorf("%w: %s %s", errRouteNotFound, r.Method, r.URL.Path))
		return
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	s.writeError(w, r, fmt.Errorf("%w: %s %s (allowed: %s)", wire.ErrMethodNotAllowed, r.Method, r.URL.Path, strings.Join(allow, ", ")))
}
