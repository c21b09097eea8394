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

// processCPU is the process's CPU time in ns, every thread's (getrusage
// RUSAGE_SELF), 0 if unknown.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
