// Command benchplot draws the benchmark's figures from the JSON results that
// `make bench` writes: the distribution of churn latencies, and the
// controller's cost (time, CPU, memory) against the number of pods.
//
//	go run . -in ../../docs/bench -out ../../docs/img
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// result is the part of the benchmark's JSON the figures use.
type result struct {
	N   int `json:"n"`
	Raw struct {
		CreateSeconds float64 `json:"createSeconds"`
	} `json:"raw"`
	Cold struct {
		Seconds    float64 `json:"seconds"`
		CPUSeconds float64 `json:"cpuSeconds"`
		RSSMiB     float64 `json:"rssMiB"`
		PeakRSSMiB float64 `json:"peakRSSMiB"`
	} `json:"cold"`
	Churn struct {
		Samples []float64 `json:"samplesMs"`
		Latency struct {
			P50, P99 float64
		} `json:"latencyMs"`
	} `json:"churn"`
	Delete struct {
		PeakRSSMiB float64 `json:"peakRSSMiB"`
	} `json:"delete"`
}

func main() {
	in := flag.String("in", "docs/bench", "Directory of bench-N.json results.")
	out := flag.String("out", "docs/img", "Directory to write the PNG figures to.")
	flag.Parse()
	if err := run(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "benchplot:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	files, err := filepath.Glob(filepath.Join(in, "bench-*.json"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no bench-*.json results in %s (run make bench first)", in)
	}
	var results []result
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var r result
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		results = append(results, r)
	}
	slices.SortFunc(results, func(a, b result) int { return a.N - b.N })
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	if err := churnFigure(results, filepath.Join(out, "churn-latency.png")); err != nil {
		return err
	}
	return costFigure(results, filepath.Join(out, "cost-vs-n.png"))
}

var palette = []color.Color{
	color.RGBA{R: 31, G: 119, B: 180, A: 255},
	color.RGBA{R: 255, G: 127, B: 14, A: 255},
	color.RGBA{R: 44, G: 160, B: 44, A: 255},
	color.RGBA{R: 214, G: 39, B: 40, A: 255},
}

// churnFigure plots, for each N, the cumulative share of IP changes whose
// mirror was seen within x milliseconds.
func churnFigure(results []result, path string) error {
	p := plot.New()
	p.Title.Text = "Churn: IP change acknowledged -> mirror seen with the new IP"
	p.X.Label.Text = "latency (ms)"
	p.Y.Label.Text = "share of changes seen (%)"
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = false, false
	for i, r := range results {
		s := slices.Clone(r.Churn.Samples)
		if len(s) == 0 {
			continue
		}
		slices.Sort(s)
		pts := make(plotter.XYs, len(s))
		for j, v := range s {
			pts[j] = plotter.XY{X: v, Y: 100 * float64(j+1) / float64(len(s))}
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		line.Color = palette[i%len(palette)]
		line.Width = vg.Points(1.5)
		p.Add(line)
		p.Legend.Add(fmt.Sprintf("N=%d (p50 %.1f ms, p99 %.1f ms)", r.N, r.Churn.Latency.P50, r.Churn.Latency.P99), line)
	}
	return p.Save(7*vg.Inch, 4*vg.Inch, path)
}

// costFigure draws three panels against N: cold-start time next to the raw
// create loop, controller CPU seconds, and memory (RSS after convergence and
// peak).
func costFigure(results []result, path string) error {
	series := func(f func(result) float64) plotter.XYs {
		pts := make(plotter.XYs, len(results))
		for i, r := range results {
			pts[i] = plotter.XY{X: float64(r.N), Y: f(r)}
		}
		return pts
	}
	panel := func(title, ylabel string, lines map[string]plotter.XYs, order []string) (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text = title
		p.X.Label.Text = "pods (N)"
		p.Y.Label.Text = ylabel
		p.Y.Min = 0
		p.Add(plotter.NewGrid())
		p.Legend.Top, p.Legend.Left = true, true
		for i, name := range order {
			l, s, err := plotter.NewLinePoints(lines[name])
			if err != nil {
				return nil, err
			}
			l.Color, s.Color = palette[i%len(palette)], palette[i%len(palette)]
			l.Width = vg.Points(1.5)
			p.Add(l, s)
			p.Legend.Add(name, l, s)
		}
		return p, nil
	}
	timeP, err := panel("Time to create all mirrors", "seconds", map[string]plotter.XYs{
		"controller cold start": series(func(r result) float64 { return r.Cold.Seconds }),
		"raw create loop":       series(func(r result) float64 { return r.Raw.CreateSeconds }),
	}, []string{"controller cold start", "raw create loop"})
	if err != nil {
		return err
	}
	cpuP, err := panel("Controller CPU, cold start", "CPU seconds", map[string]plotter.XYs{
		"user + system": series(func(r result) float64 { return r.Cold.CPUSeconds }),
	}, []string{"user + system"})
	if err != nil {
		return err
	}
	memP, err := panel("Controller memory", "MiB", map[string]plotter.XYs{
		"RSS after convergence": series(func(r result) float64 { return r.Cold.RSSMiB }),
		"peak RSS (VmHWM)":      series(func(r result) float64 { return max(r.Cold.PeakRSSMiB, r.Delete.PeakRSSMiB) }),
	}, []string{"RSS after convergence", "peak RSS (VmHWM)"})
	if err != nil {
		return err
	}
	const w, h = 12 * vg.Inch, 3.6 * vg.Inch
	img := vgimg.New(w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 3, PadX: vg.Points(12), PadY: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(6), PadTop: vg.Points(8), PadBottom: vg.Points(4)}
	plots := [][]*plot.Plot{{timeP, cpuP, memP}}
	canvases := plot.Align(plots, tiles, dc)
	for j, p := range plots[0] {
		p.Draw(canvases[0][j])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		return err
	}
	return f.Close()
}
