//go:build !linux

package kvcache

// threadCPU is unknown outside Linux: the cpu-MB/s metric is left out.
func threadCPU() int64 { return 0 }

// processCPU is unknown outside Linux.
func processCPU() int64 { return 0 }
