package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/memosrt/memosrt/internal/cli"
	"github.com/memosrt/memosrt/internal/serveclient"
	"io"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/memosrt/memosrt/server"
	"github.com/memosrt/memosrt/textmem"
)

// newMCPCmd serves the MCP tools (server.NewMCP) over stdio until the
// client closes stdin or a signal arrives. Stdout carries the protocol
// only; logs go to stderr. Without --model the memory tools work and chat
// is a tool error.
func newMCPCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the memory tools over MCP on stdin/stdout",
		Long: "Serve the MCP tools (memory add, search, list, delete; chat with --model) on stdin/stdout.\n" +
			"Stdout carries the protocol only; logs go to stderr.",
		Args: cli.NoArgs,
	}
	fs := c.Flags()
	fs.SortFlags = false
	sf := addStoreFlags(fs)
	cube := addCubeFlag(fs, "default cube `NAME` of tool calls that give none (default: none, every call names its cube)")
	ef := addEngineFlags(fs)
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if err := ef.check(cmd); err != nil {
			return err
		}
		return mcpServe(cmd.Context(), sf, ef, cube)
	}
	return c
}

func mcpServe(ctx context.Context, sf storeFlags, ef engineFlags, cube *string) error {
	if *cube != "" && !textmem.ValidCube(*cube) {
		return fmt.Errorf("--cube %q: %w", *cube, textmem.ErrBadCube)
	}
	if *sf.db == "" {
		return errors.New("--db is required (or set MEMOSRT_DB)")
	}
	if r, ok := serveclient.Find(*sf.db); ok {
		return fmt.Errorf("memosrt serve is running on %s: use its MCP endpoint %s/mcp", *sf.db, r.URL())
	}
	sf.background = true
	var efp *engineFlags
	if *ef.model != "" {
		efp = &ef // without a model: the memory tools only
	}
	o, err := sf.openOS(ctx, efp)
	if err != nil {
		return err
	}
	defer o.Close(context.WithoutCancel(ctx))
	log := logger()
	s := server.NewMCP(o, server.MCPOptions{Cube: *cube, Version: version, Logger: log})
	model := o.Model().Name
	if model == "" {
		model = "none (chat is unavailable)"
	}
	log.Info("mcp on stdio", "db", *sf.db, "model", model, "cube", *cube)
	err = s.Run(ctx, &mcp.StdioTransport{})
	if errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) {
		err = nil // the client went away, or SIGINT/SIGTERM
	}
	return err
}
