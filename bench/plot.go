package bench

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// The size of PlotTTFT's picture: 16 x 10 cm, a PNG at PlotDPI dots per inch
// (605 x 378 pixels).
const (
	PlotWidth  = 16 * vg.Centimeter
	PlotHeight = 10 * vg.Centimeter
	PlotDPI    = 96
)

// PlotTTFT draws rows as four lines with points against the prefix length
// (X, Prefix, tokens, linear; ticks at the measured prefixes when there are
// at most 8 rows): cold prefill (ColdMs), warm with the pack restored from RAM
// (WarmMs), warm with the pack decoded from its blob (WarmDiskMs) and the
// floor (FloorMs), all TTFT in milliseconds on a log-scale Y axis spanning
// whole decades (cold is one to two orders of magnitude above the others),
// with a legend right of the data, the axis labels "prefix (tokens)" and
// "TTFT (ms)" and a title. It writes the picture to path at PlotWidth x
// PlotHeight (16 x 10 cm): a PNG at PlotDPI (605 x 378 pixels), or an SVG if
// path ends in .svg (the extension's case is ignored).
//
// Rows are plotted in the order given (TTFT's: ascending prefix). It returns
// an error, and creates no file, for no rows, for a value on the log axis that
// is not a positive finite number (the error names the row and the field),
// and for a path that ends in neither .png nor .svg; and an error wrapping
// the file system's (errors.Is(err, fs.ErrNotExist) for a missing directory)
// if the file cannot be created or written, in which case a partly written
// file may remain. The picture is encoded in memory first, so an existing
// file at path is left untouched by every error but the last kind.
func PlotTTFT(rows []TTFTRow, path string) error {
	if len(rows) == 0 {
		return errors.New("bench: PlotTTFT: no rows")
	}
	ext := strings.ToLower(filepath.Ext(path))
	if ext != ".png" && ext != ".svg" {
		return fmt.Errorf("bench: PlotTTFT: %q: unsupported extension %q (.png or .svg)", path, filepath.Ext(path))
	}
	series := []struct {
		name string
		get  func(TTFTRow) float64
	}{
		{"cold prefill", func(r TTFTRow) float64 { return r.ColdMs }},
		{"warm, RAM", func(r TTFTRow) float64 { return r.WarmMs }},
		{"warm, blob", func(r TTFTRow) float64 { return r.WarmDiskMs }},
		{"floor", func(r TTFTRow) float64 { return r.FloorMs }},
	}
	fields := []string{"ColdMs", "WarmMs", "WarmDiskMs", "FloorMs"}
	lo, hi := math.Inf(1), math.Inf(-1)
	var args []any
	for si, s := range series {
		xy := make(plotter.XYs, len(rows))
		for i, r := range rows {
			v := s.get(r)
			if !(v > 0) || math.IsInf(v, 0) {
				return fmt.Errorf("bench: PlotTTFT: row %d (prefix %d): %s = %v is not a positive finite number (log-scale axis)", i, r.Prefix, fields[si], v)
			}
			xy[i] = plotter.XY{X: float64(r.Prefix), Y: v}
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
		args = append(args, s.name, xy)
	}

	p := plot.New()
	p.Title.Text = "TTFT: cold prefill vs restored pack"
	p.X.Label.Text = "prefix (tokens)"
	p.Y.Label.Text = "TTFT (ms)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	// whole decades, so the log axis always carries labelled ticks
	p.Y.Min = math.Pow10(int(math.Floor(math.Log10(lo))))
	p.Y.Max = math.Pow10(int(math.Ceil(math.Log10(hi))))
	if p.Y.Max <= hi {
		p.Y.Max *= 10 // hi a power of ten: leave room above it
	}
	if len(rows) <= 8 { // ticks at the measured prefixes, while they fit
		var ticks plot.ConstantTicks
		for _, r := range rows {
			ticks = append(ticks, plot.Tick{Value: float64(r.Prefix), Label: fmt.Sprint(r.Prefix)})
		}
		p.X.Tick.Marker = ticks
	}
	p.Add(plotter.NewGrid())
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return fmt.Errorf("bench: PlotTTFT: %w", err)
	}
	// the legend right of the plot, top-aligned with the data, where no
	// line can run under it
	leg := p.Legend
	p.Legend = plot.NewLegend()
	leg.Top, leg.Left = true, true

	var c vg.CanvasWriterTo
	if ext == ".svg" {
		c = vgsvg.New(PlotWidth, PlotHeight)
	} else {
		c = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(PlotWidth, PlotHeight), vgimg.UseDPI(PlotDPI))}
	}
	dc := draw.New(c)
	lr := leg.Rectangle(dc)
	lw := lr.Max.X - lr.Min.X + vg.Millimeter
	p.Draw(draw.Crop(dc, 0, -lw-2*vg.Millimeter, 0, 0))
	top := p.Title.TextStyle.Rectangle(p.Title.Text).Size().Y + p.Title.Padding + p.Y.Padding
	leg.Draw(draw.Crop(dc, dc.Size().X-lw, 0, 0, -top))
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return fmt.Errorf("bench: PlotTTFT: encoding %s: %w", ext[1:], err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("bench: PlotTTFT: %w", err)
	}
	return nil
}
