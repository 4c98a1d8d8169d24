// This file draws a recording as an SVG timeline (standard library only):
// one row per stage coloured busy / starved / blocked, and under each stage
// that has sub-spans a second row with its outermost sub-spans (for
// compute: attention, FFN, experts, output), with a time axis and a legend.
// Each pixel column shows the state that took most of its time, so a
// timeline of millions of events stays a small file.

package graph

import (
	"bufio"
	"cmp"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// SVGOptions shape the timeline.
type SVGOptions struct {
	Title string
	// Width of the image in pixels [1200].
	Width int
	// From and To select a window, relative to the first stage's start
	// (To <= 0: until the end).
	From, To time.Duration
}

const (
	svgLabelW = 150
	svgRowH   = 18
	svgSubH   = 12
	svgGap    = 6
)

// state colours.
var svgColors = [...]string{"#2e7d32", "#cfd8dc", "#e53935"} // busy, starved, blocked

// sub-span palette, in order of first appearance.
var svgPalette = [...]string{"#546e7a", "#1e88e5", "#fb8c00", "#8e24aa", "#00897b", "#f4511e", "#3949ab", "#c0ca33", "#6d4c41", "#d81b60", "#43a047", "#fdd835", "#00acc1", "#5e35b1", "#ffb300", "#90a4ae"}

// WriteSVG draws the recording as an SVG timeline.
func (r *Recorder) WriteSVG(w io.Writer, o SVGOptions) error {
	snaps := r.snapshots()
	width := o.Width
	if width <= 0 {
		width = 1200
	}
	plotW := width - svgLabelW - 20
	var t0, t1 int64
	for i, s := range snaps {
		if i == 0 || s.begin < t0 {
			t0 = s.begin
		}
		t1 = max(t1, s.end)
	}
	from, to := t0+int64(o.From), t1
	if o.To > 0 {
		to = min(t1, t0+int64(o.To))
	}
	if to <= from {
		to = from + 1
	}
	px := float64(to-from) / float64(plotW) // ns per pixel

	type row struct {
		label  string
		sub    bool
		runs   []svgRun
		legend []string
	}
	var rows []row
	kinds := map[string]string{} // sub-span base name -> colour
	var kindOrder []string
	for _, s := range snaps {
		var states [3][]float64 // busy, starved, blocked: ns per pixel
		for k := range states {
			states[k] = make([]float64, plotW)
		}
		add := func(k int, a, b int64) { spread(states[k], from, px, a, b) }
		const maxDepth = 3
		subs := make([]map[string][]float64, maxDepth) // per nesting depth: base name -> bins
		subOrder := make([][]string, maxDepth)
		addSub := func(depth int, name string, a, b int64) {
			if subs[depth] == nil {
				subs[depth] = map[string][]float64{}
			}
			bins, ok := subs[depth][name]
			if !ok {
				bins = make([]float64, plotW)
				subs[depth][name] = bins
				subOrder[depth] = append(subOrder[depth], name)
			}
			spread(bins, from, px, a, b)
		}
		cursor := s.begin
		var spans []traceSpan
		for _, c := range s.chunks {
			for _, e := range c {
				switch e.kind {
				case evWait, evBlocked:
					add(0, max(cursor, from), min(e.t0, to))
					k := 1
					if e.kind == evBlocked {
						k = 2
					}
					add(k, max(e.t0, from), min(e.t1, to))
					cursor = max(cursor, e.t1)
				case evSpan, evWork: // work spans that overlap stack up as nested ones
					spans = append(spans, traceSpan{name: e.name, t0: e.t0, t1: e.t1})
				}
			}
		}
		add(0, max(cursor, from), min(s.end, to))
		// Sub-spans by nesting depth (spans are recorded as they end, so
		// sort by start, longer first).
		slices.SortFunc(spans, func(a, b traceSpan) int {
			return cmp.Or(cmp.Compare(a.t0, b.t0), cmp.Compare(b.t1, a.t1))
		})
		var open []int64 // ends of the enclosing spans
		for _, sp := range spans {
			for len(open) > 0 && open[len(open)-1] <= sp.t0 {
				open = open[:len(open)-1]
			}
			depth := len(open)
			open = append(open, sp.t1)
			if depth >= maxDepth || sp.t1 <= from || sp.t0 >= to {
				continue
			}
			addSub(depth, spanBase(sp.name), max(sp.t0, from), min(sp.t1, to))
		}
		rows = append(rows, row{label: s.name, runs: dominantRuns(plotW, func(i int) (int, float64) {
			k := 0
			for j := 1; j < 3; j++ {
				if states[j][i] > states[k][i] {
					k = j
				}
			}
			return k, states[k][i]
		}, px)})
		for depth := range maxDepth {
			names := subOrder[depth]
			if len(names) == 0 {
				continue
			}
			for _, n := range names {
				if _, ok := kinds[n]; !ok {
					kinds[n] = svgPalette[len(kindOrder)%len(svgPalette)]
					kindOrder = append(kindOrder, n)
				}
			}
			bins := subs[depth]
			runs := dominantRuns(plotW, func(i int) (int, float64) {
				best, bv := -1, 0.0
				for j, n := range names {
					if v := bins[n][i]; v > bv {
						best, bv = j, v
					}
				}
				return best, bv
			}, px)
			rows = append(rows, row{label: "spans, depth " + strconv.Itoa(depth+1), sub: true, runs: runs, legend: names})
		}
	}

	// Layout.
	top := 34
	if o.Title != "" {
		top += 18
	}
	y := top
	height := top
	for _, rw := range rows {
		if rw.sub {
			height += svgSubH + svgGap
		} else {
			height += svgRowH + 2
		}
	}
	height += 60

	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica,Arial,sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(bw, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	if o.Title != "" {
		fmt.Fprintf(bw, `<text x="10" y="20" font-size="15" font-weight="bold">%s</text>`+"\n", esc(o.Title))
	}
	// Time axis.
	axisY := top - 8
	step := niceStep(float64(to-from) / 8)
	for t := math.Ceil(float64(from-t0)/step) * step; t <= float64(to-t0); t += step {
		x := float64(svgLabelW) + (t-float64(from-t0))/px
		fmt.Fprintf(bw, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eee"/>`, x, axisY+2, x, height-56)
		fmt.Fprintf(bw, `<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%s</text>`+"\n", x, axisY, fmtDur(time.Duration(t)))
	}
	for _, rw := range rows {
		h := svgRowH
		if rw.sub {
			h = svgSubH
			fmt.Fprintf(bw, `<text x="%d" y="%d" text-anchor="end" font-size="9" fill="#777">%s</text>`+"\n", svgLabelW-8, y+h-2, esc(rw.label))
		} else {
			fmt.Fprintf(bw, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", svgLabelW-8, y+h-5, esc(rw.label))
		}
		fmt.Fprintf(bw, `<rect x="%d" y="%d" width="%d" height="%d" fill="#fafafa"/>`, svgLabelW, y, plotW, h)
		for _, run := range rw.runs {
			var fill, title string
			if rw.sub {
				fill, title = kinds[rw.legend[run.k]], rw.legend[run.k]
			} else {
				fill, title = svgColors[run.k], [...]string{"busy", "starved (waiting for input)", "blocked (on output)"}[run.k]
			}
			fmt.Fprintf(bw, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"><title>%s</title></rect>`, svgLabelW+run.x0, y, run.x1-run.x0, h, fill, esc(title))
		}
		bw.WriteString("\n")
		if rw.sub {
			y += svgSubH + svgGap
		} else {
			y += svgRowH + 2
		}
	}
	// Legend.
	ly := height - 36
	x := svgLabelW
	item := func(color, label string) {
		fmt.Fprintf(bw, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`, x, ly, color, x+16, ly+10, esc(label))
		x += 28 + 7*len(label)
	}
	item(svgColors[0], "busy")
	item(svgColors[1], "starved (waiting for input)")
	item(svgColors[2], "blocked (on output)")
	if len(kindOrder) > 0 {
		ly += 18
		x = svgLabelW
		for _, k := range kindOrder {
			item(kinds[k], k)
		}
	}
	bw.WriteString("\n</svg>\n")
	return bw.Flush()
}

// spread adds the interval [a, b) to the pixel bins it overlaps (pixel i
// covers [from + i*px, from + (i+1)*px)).
func spread(bins []float64, from int64, px float64, a, b int64) {
	if b <= a {
		return
	}
	i := max(int(float64(a-from)/px), 0)
	for a < b && i < len(bins) {
		end := from + int64(float64(i+1)*px)
		if end <= a {
			i++
			continue
		}
		seg := min(b, end) - a
		bins[i] += float64(seg)
		a += seg
		i++
	}
}

// svgRun is a horizontal run of pixels of one state.
type svgRun struct{ x0, x1, k int }

// dominantRuns merges pixel columns into runs of their dominant state;
// columns covered less than a quarter by any state are left empty.
func dominantRuns(n int, at func(i int) (int, float64), px float64) []svgRun {
	var runs []svgRun
	for i := 0; i < n; i++ {
		k, v := at(i)
		if k < 0 || v < px/4 {
			continue
		}
		if l := len(runs); l > 0 && runs[l-1].k == k && runs[l-1].x1 == i {
			runs[l-1].x1 = i + 1
			continue
		}
		runs = append(runs, svgRun{i, i + 1, k})
	}
	return runs
}

// spanBase strips a layer suffix: "attn-3" -> "attn".
func spanBase(name string) string {
	if i := strings.LastIndexByte(name, '-'); i > 0 {
		if _, err := fmt.Sscanf(name[i+1:], "%d", new(int)); err == nil {
			return name[:i]
		}
	}
	return name
}

// niceStep rounds ns up to 1, 2 or 5 times a power of ten.
func niceStep(ns float64) float64 {
	if ns <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(ns)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= ns {
			return m * p
		}
	}
	return 10 * p
}

func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d >= time.Second:
		return fmt.Sprintf("%gs", math.Round(d.Seconds()*1000)/1000)
	case d >= time.Millisecond:
		return fmt.Sprintf("%gms", math.Round(float64(d)/1e3)/1e3)
	}
	return fmt.Sprintf("%gµs", math.Round(float64(d))/1e3)
}

func esc(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}
