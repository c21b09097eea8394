package wire

import (
	"context"
	"net/http"
)

// scopeKey is the context key of a request's cube scope (an access key's
// cube; absent for the admin token).
type scopeKey struct{}

// WithScope returns r limited to cube scope: the server's auth middleware
// calls it for a request made with an access key, whose cube scope is.
func WithScope(r *http.Request, scope string) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), scopeKey{}, scope))
}

// Scope returns the cube r's access key is limited to (WithScope), "" for
// none (the admin token, or no token required).
func Scope(r *http.Request) string {
	s, _ := r.Context().Value(scopeKey{}).(string)
	return s
}
