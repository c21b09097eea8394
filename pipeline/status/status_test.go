package status

import (
	"maps"
	"testing"

	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/scheduler"
)

func TestLevels(t *testing.T) {
	packs := []kvcache.Info{{ID: "a", InRAM: true}, {ID: "b", InRAM: true}, {ID: "c"}}
	got := Levels(packs, "a")
	want := map[string]string{"a": scheduler.LevelResident, "b": scheduler.LevelRAM, "c": scheduler.LevelDisk}
	if !maps.Equal(got, want) {
		t.Fatalf("Levels = %v, want %v", got, want)
	}
	if got := Levels(packs, ""); got["a"] != scheduler.LevelRAM {
		t.Fatalf("no resident pack: %v", got)
	}
}
