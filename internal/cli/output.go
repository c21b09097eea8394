package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// pkgPrefixes are the package names that start the messages of our
// packages' errors (pebble style, "kvcache: ..."): the CLI speaks to a user,
// who knows none of them.
var pkgPrefixes = []string{"memosrt", "textmem", "kvcache", "runtime", "llama", "badger", "scheduler", "lora",
	"embed", "server", "ollamastore", "gguf", "grammar", "recall", "bench", "atomicfile"}

// UserMessage is err's text without package prefixes (at the start or
// after ": ") and without a segment said twice in a row: what the command
// prints after "memosrt: ".
func UserMessage(err error) string {
	parts := strings.Split(err.Error(), ": ")
	var out []string
	for _, p := range parts {
		if IsPkg(p) {
			continue
		}
		if n := len(out); n > 0 && out[n-1] == p {
			continue
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return err.Error()
	}
	return strings.Join(out, ": ")
}

// IsPkg reports whether s is one of the package names (pkgPrefixes)
// that UserMessage drops.
func IsPkg(s string) bool {
	for _, p := range pkgPrefixes {
		if s == p {
			return true
		}
	}
	return false
}

// ParseInts reads a flag's comma-separated list of positive integers
// ("1024,4096"); empty items are skipped, an empty list is an error.
func ParseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("bad number %q in list %q", f, s)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("empty list %q", s)
	}
	return out, nil
}

// Bytes formats n bytes for people: "1.50 GiB", "12.00 MiB", "3.0 KiB",
// "512 B" (binary units).
func Bytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// PrintJSON writes v to stdout as indented JSON (a command's --json).
func PrintJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// OneLine is s with its whitespace runs made single spaces, cut to n
// runes (the last an ellipsis) when longer: a table cell.
func OneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
