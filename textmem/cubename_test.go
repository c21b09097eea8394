package textmem

import "testing"

func TestValidCube(t *testing.T) {
	for c, want := range map[string]bool{
		"alice": true, "a.b": true, "...": true, ".hidden": true, "x-1_y": true,
		"": false, ".": false, "..": false, "a/b": false, "a\x00": false, "é": false,
		string(make([]byte, 65)): false,
	} {
		if got := ValidCube(c); got != want {
			t.Errorf("ValidCube(%q) = %v, want %v", c, got, want)
		}
	}
}
