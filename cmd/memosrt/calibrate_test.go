package main

import (
	"strings"
	"testing"

	"github.com/memosrt/memosrt/internal/testenv"
	"github.com/memosrt/memosrt/internal/testmodels"
)

// calibrate prints the gate's table on stories260K: q4 fails the default
// targets (96.0% top-1, 50.0% greedy), q8 passes and is auto's choice;
// with loose targets q4 passes and is chosen. Bad targets are refused.
func TestCalibrateCommand(t *testing.T) {
	model := testmodels.Stories(t)
	out := must(t, "calibrate", "--model", model, "--threads", "1")
	q4 := "q4         -           -   96.0%   50.0%"
	if !testenv.AVX512() {
		q4 = "q4         -           -   95.7%   50.0%" // ggml's AVX2 float sums: one position less (kvgate.TestCalibrateTable)
	}
	for _, want := range []string{q4, "kv codec: q8 stored (size ratio 1.67x); auto chooses q8"} {
		if !strings.Contains(out, want) {
			t.Fatalf("missing %q in:\n%s", want, out)
		}
	}
	out = must(t, "calibrate", "--model", model, "--threads", "1", "--kv-codec", "q4", "--targets", "top1=0.95,greedy=0.5")
	if !strings.Contains(out, "kv codec: q4 stored (size ratio 2.84x); auto chooses q4") {
		t.Fatalf("loose targets:\n%s", out)
	}
	for _, bad := range [][]string{{"--targets", "top1=2"}, {"--targets", "speed=0.5"}, {"--kv-codec", "q3"}, {"--kv-codec", "exact"}} {
		if out, err := runCLI(t, append([]string{"calibrate", "--model", model}, bad...)...); err == nil {
			t.Fatalf("%v accepted:\n%s", bad, out)
		}
	}
}
