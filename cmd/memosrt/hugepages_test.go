package main

import (
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"testing"
)

// hugePagesEnv re-executes only under the kernel's "madvise" mode, keeps
// every other variable as it was, appends to tunables already set, and
// leaves alone an environment that chose glibc.malloc.hugetlb itself or
// opted out with MEMOSRT_HUGEPAGES=0.
func TestHugePagesEnv(t *testing.T) {
	const madvise, always, never = "always [madvise] never\n", "[always] madvise never\n", "always madvise [never]\n"
	for _, tc := range []struct {
		name string
		env  []string
		mode string
		want []string // nil: no re-exec
	}{
		{"madvise", []string{"HOME=/root", "PATH=/bin"}, madvise, []string{"HOME=/root", "PATH=/bin", "GLIBC_TUNABLES=glibc.malloc.hugetlb=1"}},
		{"other tunables", []string{"GLIBC_TUNABLES=glibc.malloc.arena_max=2", "A=1"}, madvise, []string{"A=1", "GLIBC_TUNABLES=glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"}},
		{"chosen already", []string{"GLIBC_TUNABLES=glibc.malloc.hugetlb=0"}, madvise, nil},
		{"after the re-exec", []string{"GLIBC_TUNABLES=glibc.malloc.hugetlb=1"}, madvise, nil},
		{"opted out", []string{"MEMOSRT_HUGEPAGES=0", "A=1"}, madvise, nil},
		{"always", []string{"A=1"}, always, nil},
		{"never", []string{"A=1"}, never, nil},
		{"unreadable", []string{"A=1"}, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := hugePagesEnv(tc.env, tc.mode)
			if ok != (tc.want != nil) || !slices.Equal(got, tc.want) {
				t.Fatalf("hugePagesEnv(%q, %q) = %q, %v; want %q", tc.env, tc.mode, got, ok, tc.want)
			}
		})
	}
}

// Under the kernel's "madvise" mode a running memosrt has re-executed
// itself (same process, still named after its binary) with
// glibc.malloc.hugetlb set; with MEMOSRT_HUGEPAGES=0 it has not.
func TestHugePagesReexec(t *testing.T) {
	if goruntime.GOARCH != "amd64" {
		t.Skipf("%s: memosrt re-executes on amd64 only", goruntime.GOARCH)
	}
	mode, err := os.ReadFile(thpEnabled)
	if err != nil || !strings.Contains(string(mode), "[madvise]") {
		t.Skipf("THP mode %q: memosrt re-executes only under madvise", strings.TrimSpace(string(mode)))
	}
	if v := os.Getenv("GLIBC_TUNABLES"); v != "" {
		t.Skipf("GLIBC_TUNABLES=%s set by the caller", v)
	}
	for _, tc := range []struct {
		env  []string
		want bool
	}{{nil, true}, {[]string{"MEMOSRT_HUGEPAGES=0"}, false}} {
		p := startServe(t, t.TempDir(), tc.env)
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", p.cmd.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		if got := slices.Contains(strings.Split(string(b), "\x00"), "GLIBC_TUNABLES="+hugetlbTunable); got != tc.want {
			t.Fatalf("env %q: GLIBC_TUNABLES=%s in the serving process: %v, want %v", tc.env, hugetlbTunable, got, tc.want)
		}
		// ps and top name the process after the binary
		if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p.cmd.Process.Pid)); err != nil || strings.TrimSpace(string(comm)) != filepath.Base(binPath) {
			t.Fatalf("env %q: comm %q (%v), want %q", tc.env, comm, err, filepath.Base(binPath))
		}
		p.stop(t)
	}
}
