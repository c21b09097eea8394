//go:build !linux

package kvcache

// threadCPU is unknown outside Linux: the cpu-MB/s metric is left out.
func threadCPU() int64 { return 0 }
