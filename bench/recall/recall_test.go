package recall

import (
	"context"
	"encoding/json"
	"os"
	"testing"
)

// TestLoCoMoDev runs the benchmark on the file named by MEMOSRT_LOCOMO
// (e.g. /work/shared/data/locomo-dev.json); skipped when unset.
func TestLoCoMoDev(t *testing.T) {
	path := os.Getenv("MEMOSRT_LOCOMO")
	if path == "" {
		t.Skip("MEMOSRT_LOCOMO not set")
	}
	rep, err := Run(context.Background(), Options{LoCoMo: path})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(rep)
	t.Logf("\n%s\n%s\nelapsed %v", rep.Table(), b, rep.Elapsed)
}
