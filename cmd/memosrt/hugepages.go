package main

import (
	"os"
	goruntime "runtime"
	"strings"
	"syscall"
)

// thpEnabled is the kernel's transparent huge page mode for anonymous
// memory: "[madvise]" selected means only memory a process marks with
// madvise(MADV_HUGEPAGE) gets 2 MiB pages.
const thpEnabled = "/sys/kernel/mm/transparent_hugepage/enabled"

// hugetlbTunable makes glibc's malloc mark the memory it maps for
// allocations of 2 MiB or more with MADV_HUGEPAGE (glibc 2.35 and later;
// older versions ignore it). ggml allocates the model's weights (read, not
// mapped), the KV cache and its compute buffers that way.
const hugetlbTunable = "glibc.malloc.hugetlb=1"

// hugePagesEnv returns the environment to re-execute the process with so
// that glibc's malloc asks for transparent huge pages, and whether to:
// only where the kernel gives them on request alone (mode "madvise"), the
// environment does not set glibc.malloc.hugetlb itself, and
// MEMOSRT_HUGEPAGES is not "0". The weights of a model read into 4 KiB
// pages cost prefill time that 2 MiB pages do not (docs/benchmarks.md,
// Prefill level with the peer).
func hugePagesEnv(env []string, mode string) ([]string, bool) {
	if !strings.Contains(mode, "[madvise]") {
		return nil, false
	}
	out := make([]string, 0, len(env)+1)
	tun := ""
	for _, kv := range env {
		switch {
		case kv == "MEMOSRT_HUGEPAGES=0":
			return nil, false
		case strings.HasPrefix(kv, "GLIBC_TUNABLES="):
			tun = strings.TrimPrefix(kv, "GLIBC_TUNABLES=")
			if strings.Contains(tun, "glibc.malloc.hugetlb") {
				return nil, false
			}
		default:
			out = append(out, kv)
		}
	}
	if tun != "" {
		tun += ":"
	}
	return append(out, "GLIBC_TUNABLES="+tun+hugetlbTunable), true
}

// hugePages re-executes the running binary with hugePagesEnv's environment
// when it says to, before anything else has run: the same process, by the
// binary's own path (so that ps and top still name it memosrt); if the
// kernel's mode or the binary's path cannot be read, or the exec fails, the
// process goes on as it is. x86-64 builds only, where it was measured: an
// arm64 build (and its demo under qemu-user, whose exec of a guest binary
// depends on the host's binfmt setup) runs as it started.
func hugePages() {
	if goruntime.GOARCH != "amd64" {
		return
	}
	mode, err := os.ReadFile(thpEnabled)
	if err != nil {
		return
	}
	env, ok := hugePagesEnv(os.Environ(), string(mode))
	if !ok {
		return
	}
	self, err := os.Executable()
	if err != nil {
		return
	}
	_ = syscall.Exec(self, os.Args, env)
}
