package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/memosrt/memosrt/internal/cli"
	"github.com/memosrt/memosrt/runtime/llama"
)

func newDevicesCmd() *cobra.Command {
	return &cobra.Command{Use: "devices", Short: "List the compute devices ggml found", Args: cli.NoArgs,
		RunE: func(*cobra.Command, []string) error { return devices() }}
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{Use: "version", Short: "Print the version and devices", Args: cli.NoArgs,
		RunE: func(*cobra.Command, []string) error { return versionInfo() }}
}

func devices() error {
	llama.Init(libDir())
	for _, d := range llama.Devices() {
		mem := ""
		if d.TotalBytes > 0 {
			mem = fmt.Sprintf("  %s free of %s", cli.Bytes(int64(d.FreeBytes)), cli.Bytes(int64(d.TotalBytes)))
		}
		fmt.Printf("%-6s %-10s %s%s\n", d.Kind, d.Name, d.Description, mem)
	}
	return nil
}

func versionInfo() error {
	fmt.Printf("memosrt %s\nbackend lib dir: %s\n", version, libDir())
	if err := devices(); err != nil {
		return err
	}
	llama.Init("")
	fmt.Println(llama.SystemInfo())
	return nil
}
