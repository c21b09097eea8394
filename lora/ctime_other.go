//go:build !linux && !darwin

package lora

import "os"

// changeTime is 0 where the stat carries no status change time.
func changeTime(os.FileInfo) int64 { return 0 }
