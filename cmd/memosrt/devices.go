package main

import (
	"context"
	"fmt"

	"github.com/memosrt/memosrt/runtime/llama"
)

func cmdDevices(ctx context.Context, args []string) error {
	llama.Init(libDir())
	for _, d := range llama.Devices() {
		mem := ""
		if d.TotalBytes > 0 {
			mem = fmt.Sprintf("  %s free of %s", bytesStr(int64(d.FreeBytes)), bytesStr(int64(d.TotalBytes)))
		}
		fmt.Printf("%-6s %-10s %s%s\n", d.Kind, d.Name, d.Description, mem)
	}
	return nil
}

func cmdVersion(ctx context.Context, args []string) error {
	fmt.Printf("memosrt %s\nbackend lib dir: %s\n", version, libDir())
	if err := cmdDevices(ctx, nil); err != nil {
		return err
	}
	llama.Init("")
	fmt.Println(llama.SystemInfo())
	return nil
}
