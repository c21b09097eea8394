package memory

import (
	"testing"

	"github.com/memosrt/memosrt/server/wire"
)

// TestImportConflictStatus: an import over an existing cube is a 409 with
// no field (a case of server's TestErrStatusShapes, moved with
// importConflict).
func TestImportConflictStatus(t *testing.T) {
	err := importConflict{cube: "c"}
	if code, typ := wire.Status(err); code != 409 || typ != "invalid_request_error" {
		t.Errorf("importConflict: wire.Status = %d %q, want 409 %q", code, typ, "invalid_request_error")
	}
	if f := wire.Field(err); f != "" {
		t.Errorf("importConflict: wire.Field = %q, want %q", f, "")
	}
}
