package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/internal/testutil"
)

func writeKey(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestEncryptKeyFile stores memories and a pack with --encrypt-key-file,
// checks that no raw file holds the memory text, that the key reads them
// back in later processes, and that a missing, wrong or malformed key fails
// with a clear error and prints no data.
func TestEncryptKeyFile(t *testing.T) {
	const secret = "Zephyrine keeps the spare key under the blue flowerpot."
	db := t.TempDir()
	key := writeKey(t, "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n")
	must(t, "mem", "add", "--db", db, "--encrypt-key-file", key, "--cube", "z", secret)
	must(t, "mem", "add", "--db", db, "--encrypt-key-file", key, "--cube", "z", "Zephyrine likes tea.")
	must(t, "kv", "warm", "--db", db, "--encrypt-key-file", key, "--model", testmodels.Stories(t), "--cube", "z")
	if files := testutil.FilesContaining(t, db, "Zephyrine"); len(files) != 0 {
		t.Fatalf("memory text in plaintext in %v", files)
	}
	if out := must(t, "mem", "ls", "--db", db, "--encrypt-key-file", key, "--cube", "z"); !strings.Contains(out, secret) {
		t.Fatalf("mem ls with the key:\n%s", out)
	}
	if out := must(t, "kv", "ls", "--db", db, "--encrypt-key-file", key, "--cube", "z"); strings.Count(out, "\n") != 2 {
		t.Fatalf("kv ls with the key:\n%s", out)
	}
	// MEMOSRT_ENCRYPT_KEY_FILE is the flag's default
	cmd := exec.Command(binPath, "mem", "search", "--db", db, "--cube", "z", "flowerpot")
	cmd.Env = append(os.Environ(), "MEMOSRT_ENCRYPT_KEY_FILE="+key)
	if out, err := cmd.Output(); err != nil || !strings.Contains(string(out), "flowerpot") {
		t.Fatalf("search with MEMOSRT_ENCRYPT_KEY_FILE: %v\n%s", err, out)
	}

	plain := t.TempDir()
	must(t, "mem", "add", "--db", plain, "--cube", "p", "plain text memory")
	bad := []struct {
		name string
		args []string
		want string
	}{
		{"no-key", []string{"mem", "ls", "--db", db, "--cube", "z"}, "wrong or missing encryption key: " + db + ": it is encrypted and no key was given (--encrypt-key-file)"},
		{"wrong-key", []string{"mem", "ls", "--db", db, "--cube", "z", "--encrypt-key-file",
			writeKey(t, strings.Repeat("ab", 32))}, "the 32-byte key given is not the one it was created with, or it is not encrypted"},
		{"short-key", []string{"mem", "ls", "--db", db, "--cube", "z", "--encrypt-key-file",
			writeKey(t, strings.Repeat("ab", 16))}, "the 16-byte key given is not the one it was created with"},
		{"kv-no-key", []string{"kv", "ls", "--db", db}, "it is encrypted and no key was given"},
		{"key-on-plain", []string{"mem", "ls", "--db", plain, "--cube", "p", "--encrypt-key-file", key}, "or it is not encrypted"},
		{"missing-file", []string{"mem", "ls", "--db", db, "--cube", "z", "--encrypt-key-file", "/nonexistent/key"},
			"--encrypt-key-file: open /nonexistent/key: no such file or directory"},
		{"not-hex", []string{"mem", "ls", "--db", db, "--cube", "z", "--encrypt-key-file", writeKey(t, "correct horse battery staple")},
			"not hex digits (make a key with `openssl rand -hex 32`)"},
		{"bad-length", []string{"mem", "ls", "--db", db, "--cube", "z", "--encrypt-key-file", writeKey(t, "abcd")},
			"4 hex digits, want 32, 48 or 64"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runCLI(t, tc.args...)
			if err == nil {
				t.Fatalf("no error:\n%s", out)
			}
			if !strings.Contains(out, tc.want) || strings.Contains(out, "Zephyrine") {
				t.Fatalf("output %q, want it to contain %q and no memory text", out, tc.want)
			}
		})
	}
	// the failed opens changed nothing
	if out := must(t, "mem", "ls", "--db", db, "--encrypt-key-file", key, "--cube", "z"); strings.Count(out, "\n") != 3 {
		t.Fatalf("mem ls after failed opens:\n%s", out)
	}
}
