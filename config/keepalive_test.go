package config

import (
	"testing"
	"time"
)

// keep-alive as Ollama reads it: a Go duration or seconds; negative is
// forever (-1).
func TestParseKeepAlive(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"5m", 5 * time.Minute, true},
		{"0", 0, true},
		{"30", 30 * time.Second, true},
		{"1.5", 1500 * time.Millisecond, true},
		{"-1", -1, true},
		{"-5m", -1, true},
		{"1h30m", 90 * time.Minute, true},
		{"soon", 0, false},
		{"", 0, false},
	} {
		got, err := ParseKeepAlive(c.in)
		if (err == nil) != c.ok || c.ok && got != c.want {
			t.Errorf("ParseKeepAlive(%q) = %v, %v; want %v (ok %v)", c.in, got, err, c.want, c.ok)
		}
	}
}
