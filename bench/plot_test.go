package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/png"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memosrt/memosrt/internal/testmodels"
)

func syntheticRows() []TTFTRow {
	return []TTFTRow{
		{Prefix: 128, Query: 16, ColdMs: 40, WarmMs: 3.1, WarmDiskMs: 3.6, FloorMs: 2.9},
		{Prefix: 512, Query: 16, ColdMs: 160, WarmMs: 4.2, WarmDiskMs: 5.9, FloorMs: 3.8},
		{Prefix: 1024, Query: 16, ColdMs: 350, WarmMs: 6.3, WarmDiskMs: 9.8, FloorMs: 5.7},
	}
}

// TestPlotTTFT writes a PNG of the expected pixel size and an SVG.
func TestPlotTTFT(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "ttft.png")
	if err := PlotTTFT(syntheticRows(), p); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	px := func(l float64) int { return int(l/72*PlotDPI + 0.5) } // vg lengths are points
	w, h := px(float64(PlotWidth)), px(float64(PlotHeight))
	if w != 605 || h != 378 {
		t.Fatalf("16x10 cm at %d dpi is %dx%d px, want 605x378", PlotDPI, w, h)
	}
	if got := img.Bounds(); got.Dx() != w || got.Dy() != h {
		t.Fatalf("PNG is %dx%d px, want %dx%d", got.Dx(), got.Dy(), w, h)
	}

	// one row, every value a power of ten: degenerate ranges still plot
	one := []TTFTRow{{Prefix: 64, ColdMs: 10, WarmMs: 1, WarmDiskMs: 1, FloorMs: 1}}
	if err := PlotTTFT(one, filepath.Join(dir, "one.png")); err != nil {
		t.Fatal(err)
	}

	s := filepath.Join(dir, "ttft.SVG")
	if err := PlotTTFT(syntheticRows(), s); err != nil {
		t.Fatal(err)
	}
	b, err = os.ReadFile(s)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte("<svg")) || !bytes.Contains(b, []byte("</svg>")) {
		t.Fatalf("not an SVG: %.200q", b)
	}
}

// TestPlotTTFTErrors: bad input is an error and leaves no file behind.
func TestPlotTTFTErrors(t *testing.T) {
	dir := t.TempDir()
	bad := func(f func(*TTFTRow)) []TTFTRow {
		rows := syntheticRows()
		f(&rows[1])
		return rows
	}
	for _, c := range []struct {
		name, path, want string
		rows             []TTFTRow
	}{
		{"empty", "a.png", "no rows", nil},
		{"zero cold", "b.png", "ColdMs", bad(func(r *TTFTRow) { r.ColdMs = 0 })},
		{"negative warm", "c.png", "WarmMs", bad(func(r *TTFTRow) { r.WarmMs = -1 })},
		{"NaN blob", "d.png", "WarmDiskMs", bad(func(r *TTFTRow) { r.WarmDiskMs = math.NaN() })},
		{"Inf floor", "e.svg", "FloorMs", bad(func(r *TTFTRow) { r.FloorMs = math.Inf(1) })},
		{"extension", "f.jpg", "unsupported extension", syntheticRows()},
		{"no extension", "g", "unsupported extension", syntheticRows()},
	} {
		p := filepath.Join(dir, c.path)
		err := PlotTTFT(c.rows, p)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want one containing %q", c.name, err, c.want)
		}
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s: %s written", c.name, c.path)
		}
	}
	// a write error: the directory does not exist
	if err := PlotTTFT(syntheticRows(), filepath.Join(dir, "missing", "h.png")); err == nil || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing directory: err %v", err)
	}
}

// TestTTFTPlotStories is the opt-in run behind the TTFT picture of README.md
// and docs/benchmarks.md: the
// real benchmark on stories260K (n_ctx 2048, 2 threads, CPU) at five prefix
// lengths, plotted to $MEMOSRT_TTFT_PLOT (relative paths are relative to
// bench/), the table printed. Skipped unless that variable is set:
//
//	MEMOSRT_TTFT_PLOT=$PWD/docs/ttft-stories260K.png go test ./bench -run TestTTFTPlotStories -v
func TestTTFTPlotStories(t *testing.T) {
	out := os.Getenv("MEMOSRT_TTFT_PLOT")
	if out == "" {
		t.Skip("set MEMOSRT_TTFT_PLOT=FILE.png to run the benchmark and plot it")
	}
	e := loadEngine(t, testmodels.Stories(t), 2048)
	rows, err := TTFT(context.Background(), e, TTFTOptions{Prefixes: []int{128, 256, 512, 1024, 1536}, Reps: 5, ColdReps: 3})
	if err != nil {
		t.Fatal(err)
	}
	if err := PlotTTFT(rows, out); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("wrote %s\n\n%s", out, TTFTTable(rows))
}
