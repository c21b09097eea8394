package main

import (
	"encoding/hex"
	"fmt"
	"os"
	"strings"
)

// keyFileUsage is the help text of --encrypt-key-file, on every command
// that opens a data directory.
// The backquoted FILE is the placeholder pflag shows (--encrypt-key-file FILE).
const keyFileUsage = "hex AES key `FILE` of the data directory: 32, 48 or 64 hex digits " +
	"(AES-128/192/256; make one with 'openssl rand -hex 32'); turns on encryption at rest (default $MEMOSRT_ENCRYPT_KEY_FILE)"

// readKeyFile reads an encryption key file: hex digits for a 16, 24 or 32
// byte key, surrounding whitespace ignored. An empty path means no key.
func readKeyFile(path string) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--encrypt-key-file: %w", err)
	}
	s := strings.TrimSpace(string(b))
	key, err := hex.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("--encrypt-key-file %s: not hex digits (make a key with `openssl rand -hex 32`)", path)
	}
	if n := len(key); n != 16 && n != 24 && n != 32 {
		return nil, fmt.Errorf("--encrypt-key-file %s: %d hex digits, want 32, 48 or 64 (make a key with `openssl rand -hex 32`)", path, len(s))
	}
	return key, nil
}
