package server

import (
	"context"
	"net/http"
	"slices"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/server/mcp"
	"github.com/memosrt/memosrt/server/wire"
)

// MCPOptions configure the MCP server of NewMCP (package server/mcp's
// Options).
type MCPOptions = mcp.Options

// NewMCP returns the MCP tool set over o for a transport of its own, as
// `memosrt mcp` serves it on stdio: mcp.New (package server/mcp), which
// panics on a nil o.
func NewMCP(o *memosrt.OS, opts MCPOptions) *sdk.Server { return mcp.New(o, opts) }

// mcpHandler serves the MCP tools at /mcp (mcp.NewHandler). It sits behind
// wrap: the bearer token is checked per POST, and each tool call takes its
// access from that POST's headers: an access key's grants, and the cubes
// the X-Memosrt-Cube header names (a list as on the generate routes: the
// first is the default cube, the others the read cubes of chat and
// search_memory calls naming no cube), else the key's only cube as the
// default; each tool checks the right it needs on its cubes.
func (s *Server) mcpHandler() http.Handler {
	caller := func(ctx context.Context, h http.Header) (*memosrt.AccessKey, []string, error) {
		var k *memosrt.AccessKey
		if s.opts.Token != "" {
			// wrap let this POST in; its token says which cubes it may use
			var err error
			if k, err = s.authenticate(ctx, h); err != nil {
				return nil, nil, err
			}
		}
		cubes := splitCubes(h.Get(CubeHeader))
		if i := slices.Index(cubes, ""); i >= 0 {
			return nil, nil, wire.BadField(CubeHeader, "cube %d of %q is empty (names joined by commas)", i+1, h.Get(CubeHeader))
		}
		if k != nil && len(cubes) == 0 {
			if c := wire.DefaultCube(wire.ContextWithKey(ctx, *k)); c != "" {
				cubes = []string{c}
			}
		}
		return k, cubes, nil
	}
	return mcp.NewHandler(s.os, mcp.Options{Version: s.opts.Version, Logger: s.log}, s.opts.MaxBodyBytes, caller)
}
