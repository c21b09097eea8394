package kvcache

import "syscall"

// threadCPU is the calling OS thread's CPU time in ns (getrusage
// RUSAGE_THREAD), 0 if unknown.
func threadCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1, &ru); err != nil { // 1: RUSAGE_THREAD
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
