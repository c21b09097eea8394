package server

import (
	"context"
	"net/http"

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
// access from that POST's headers: an access key's grants (its only cube is
// the default), else the X-Memosrt-Cube header as the default; each tool
// checks the right it needs on its cube.
func (s *Server) mcpHandler() http.Handler {
	caller := func(ctx context.Context, h http.Header) (*memosrt.AccessKey, string, error) {
		var k *memosrt.AccessKey
		if s.opts.Token != "" {
			// wrap let this POST in; its token says which cubes it may use
			var err error
			if k, err = s.authenticate(ctx, h); err != nil {
				return nil, "", err
			}
		}
		if k != nil {
			return k, wire.DefaultCube(wire.ContextWithKey(ctx, *k)), nil
		}
		return nil, h.Get(CubeHeader), nil
	}
	return mcp.NewHandler(s.os, mcp.Options{Version: s.opts.Version, Logger: s.log}, s.opts.MaxBodyBytes, caller)
}
