package wire

import (
	"context"
	"fmt"
	"net/http"
	"slices"

	"github.com/memosrt/memosrt"
)

// Need is what a route asks of a request's bearer token. The admin token
// (and the CLI's local one) may do everything; an access key what its
// grants allow. Without a token configured every request may do
// everything.
type Need uint8

// What routes need, from least to most.
const (
	// NeedPublic: no token at all (probes, the version, the inspector's
	// static files).
	NeedPublic Need = iota + 1
	// NeedKey: any valid token. The route touches no cube, or checks the
	// cube it reads from the body or the X-Memosrt-Cube header itself
	// (chats and generations: read; MCP tools: read or write), or shows
	// only the key's cubes.
	NeedKey
	// NeedRead: the read right on the path's {cube}.
	NeedRead
	// NeedWrite: the write right on the path's {cube}.
	NeedWrite
	// NeedAdmin: the admin token; every access key is refused.
	NeedAdmin
)

var needNames = [...]string{NeedPublic: "public", NeedKey: "key", NeedRead: "read", NeedWrite: "write", NeedAdmin: "admin"}

// String returns public, key, read, write or admin.
func (n Need) String() string {
	if n >= NeedPublic && n <= NeedAdmin {
		return needNames[n]
	}
	return fmt.Sprintf("need(%d)", uint8(n))
}

// Router is where a surface adds its routes, each with what it needs; the
// server checks the need before the handler runs (a NeedRead or NeedWrite
// route's pattern has a {cube} wildcard).
type Router interface {
	Handle(need Need, pattern string, h http.Handler)
}

// keyCtx is the context key of a request's access key.
type keyCtx struct{}

// WithKey returns r made with access key k: the server's auth middleware
// calls it for a request whose bearer token is an access key.
func WithKey(r *http.Request, k memosrt.AccessKey) *http.Request {
	return r.WithContext(ContextWithKey(r.Context(), k))
}

// ContextWithKey returns ctx carrying access key k (WithKey's context).
func ContextWithKey(ctx context.Context, k memosrt.AccessKey) context.Context {
	return context.WithValue(ctx, keyCtx{}, &k)
}

// Key returns the access key r was made with (WithKey); nil for the admin
// token, the local one, or a server that requires no token: every cube.
func Key(r *http.Request) *memosrt.AccessKey { return KeyOf(r.Context()) }

// KeyOf is Key of a context.
func KeyOf(ctx context.Context) *memosrt.AccessKey {
	k, _ := ctx.Value(keyCtx{}).(*memosrt.AccessKey)
	return k
}

// Allow returns nil when the caller of ctx may use cube with need: always
// without an access key, else memosrt.OS.KeyAllows (an error wrapping
// memosrt.ErrKeyDenied, HTTP 403, naming the cube and the right).
func Allow(ctx context.Context, o *memosrt.OS, cube string, need memosrt.KeyRight) error {
	k := KeyOf(ctx)
	if k == nil {
		return nil
	}
	return o.KeyAllows(ctx, *k, cube, need)
}

// DefaultCube is the cube of a request by the caller of ctx that names
// none: an access key's cube when it has exactly one, else "" (no cube).
func DefaultCube(ctx context.Context) string {
	if k := KeyOf(ctx); k != nil && len(k.Grants) == 1 {
		return k.Grants[0].Cube
	}
	return ""
}

// ReadOnly reports whether the caller of ctx may read cube but not write
// it: its chats there record nothing (no turn, no conversation pack).
func ReadOnly(ctx context.Context, cube string) bool {
	k := KeyOf(ctx)
	if k == nil || cube == "" {
		return false
	}
	g, ok := k.Grant(cube)
	return ok && !g.Right.Allows(memosrt.KeyWrite)
}

// Distinct returns names without repeats, each where first named: a cube
// named twice in a request's list counts once.
func Distinct(names []string) []string {
	var out []string
	for _, c := range names {
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}
