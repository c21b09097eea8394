package memosrt

import (
	"context"
	"errors"
	"testing"
)

// TestWarmInCubeDeleteWindow warms a cube at DeleteCube's failpoint,
// between the delete of its memories and the rest (packs, tier state,
// record): the warm finds the record but no memories, and must answer
// ErrUnknownCube (HTTP 404), not the *FieldError of a cube without
// memories (400). A warm after the delete answers ErrUnknownCube too, and
// a warm of a cube that merely has no memories still gets the FieldError.
func TestWarmInCubeDeleteWindow(t *testing.T) {
	ctx := context.Background()
	o := openOS(t, testOptions(t, t.TempDir()))
	addMemories(t, o, "a", "Lily has a dog named Max.", "Max likes to run in the park.")
	var inWindow error
	calls := 0
	o.afterTextDelete = func(cube string) {
		calls++
		_, inWindow = o.Warm(ctx, cube, WarmOptions{})
	}
	if err := o.DeleteCube(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Fatalf("failpoint ran %d times, want 1", calls)
	}
	if !errors.Is(inWindow, ErrUnknownCube) {
		t.Fatalf("warm between the text delete and the rest: %v, want ErrUnknownCube", inWindow)
	}
	o.afterTextDelete = nil
	if _, err := o.Warm(ctx, "a", WarmOptions{}); !errors.Is(err, ErrUnknownCube) {
		t.Fatalf("warm after the delete: %v, want ErrUnknownCube", err)
	}
	if _, err := o.CreateCube(ctx, Cube{Name: "empty"}); err != nil {
		t.Fatal(err)
	}
	var fe *FieldError
	if _, err := o.Warm(ctx, "empty", WarmOptions{}); !errors.As(err, &fe) || fe.Field != "cube" {
		t.Fatalf("warm of a cube without memories: %v, want a FieldError on cube", err)
	}
}
