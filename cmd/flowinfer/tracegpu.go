package main

// tracegpu.go: trace's summary of the device's own timing of compute's
// spans on the Vulkan backend (model.DeviceTimer; stages/devicespans.go
// records them as "gpu:" work spans and "gpu-wait" sub-spans of compute).

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/flowinfer/flowinfer/graph"
	"github.com/flowinfer/flowinfer/model"
)

// printDeviceSpans prints how long the device spent in compute's spans
// (the layer-level ones: attn, ffn, output, which do not nest), the
// share of each kind, and how long the host waited for the device; or
// why there are no device spans; then the expert uploads (printUploads).
func printDeviceSpans(w io.Writer, ops model.Ops, sum graph.Summary, detail graph.Detail) {
	if _, split := ops.(*model.Split); split {
		fmt.Fprintln(w, "gpu: no device spans: the placement splits the layers between the CPU and the device (-ngl, --vram); device timing needs every layer on the device")
		return
	}
	dt, ok := ops.(model.DeviceTimer)
	if !ok {
		fmt.Fprintln(w, "gpu: no device spans: the backend does not time its device work")
		return
	}
	if err := dt.DeviceTiming(); err != nil {
		fmt.Fprintf(w, "gpu: no device spans: %v\n", err)
		return
	}
	if detail < graph.DetailLayers {
		fmt.Fprintln(w, "gpu: no device spans at --detail stages (they time the layers: --detail layers or ops)")
		return
	}
	for _, s := range sum {
		if s.Stage != "compute" {
			continue
		}
		var busy time.Duration
		var n int64
		kinds := map[string]time.Duration{}
		for name, ws := range s.Work {
			k, ok := strings.CutPrefix(name, "gpu:")
			if !ok {
				continue
			}
			k = spanKind(k)
			if k == "upload" || k == "upload-wait" { // inside the ffn spans: printUploads
				continue
			}
			kinds[k] += ws.Sum
			if !strings.Contains(k, "_") { // op spans nest inside the layer-level ones
				busy += ws.Sum
				n += ws.Count
			}
		}
		wait := s.Spans["gpu-wait"]
		wall := max(s.Wall, 1)
		fmt.Fprintf(w, "gpu: device time in %d layer-level spans %v (%.1f%% of compute's wall %v); the host waited for the device %v in %d waits (%.1f%%)\n",
			n, busy.Round(time.Microsecond), 100*float64(busy)/float64(wall), s.Wall.Round(time.Microsecond),
			wait.Total.Round(time.Microsecond), wait.Count, 100*float64(wait.Total)/float64(wall))
		names := slices.SortedFunc(func(yield func(string) bool) {
			for k := range kinds {
				if !yield(k) {
					return
				}
			}
		}, func(a, b string) int { return int(kinds[b] - kinds[a]) })
		fmt.Fprint(w, "gpu spans (device time summed over layers, % of compute's wall time):")
		for _, k := range names {
			fmt.Fprintf(w, " %s %.1f%%", k, 100*float64(kinds[k])/float64(wall))
		}
		fmt.Fprintln(w)
		printUploads(w, s)
	}
	if de, ok := ops.(deviceExperts); ok {
		if st := de.ExpertStats(); st.Slots > 0 && st.Misses > 0 {
			fmt.Fprintf(w, "gpu expert slots: %d hits, %d misses of %d-byte slots; %d bytes uploaded since the model loaded\n",
				st.Hits, st.Misses, st.SlotBytes, st.UploadBytes)
		}
	}
}

// printUploads prints the device's expert uploads of compute's summary s
// (a VRAM budget with fewer expert slots than experts): their bytes,
// device time and rate in all and per layer, and how long the device's
// compute waited for them; nothing when there were none.
func printUploads(w io.Writer, s graph.StageSummary) {
	type layer struct {
		il    int
		bytes int64
		dur   time.Duration
		n     int64
	}
	var ls []layer
	var total layer
	for name, ws := range s.Work {
		k, ok := strings.CutPrefix(name, "gpu:upload-")
		if !ok {
			continue
		}
		il, err := strconv.Atoi(k)
		if err != nil { // upload-wait-<il>
			continue
		}
		l := layer{il: il, bytes: s.Counters[name].Sum, dur: ws.Sum, n: ws.Count}
		ls = append(ls, l)
		total.bytes, total.dur, total.n = total.bytes+l.bytes, total.dur+l.dur, total.n+l.n
	}
	if total.n == 0 {
		return
	}
	var wait time.Duration
	var waits int64
	for name, ws := range s.Work {
		if strings.HasPrefix(name, "gpu:upload-wait-") {
			wait, waits = wait+ws.Sum, waits+ws.Count
		}
	}
	gbps := func(b int64, d time.Duration) float64 { return float64(b) / float64(max(d, 1)) }
	fmt.Fprintf(w, "gpu uploads: %d bytes in %d uploads, device time %v = %.3f GB/s; compute waited for them %v in %d waits (%.1f%% of compute's wall)\n",
		total.bytes, total.n, total.dur.Round(time.Microsecond), gbps(total.bytes, total.dur),
		wait.Round(time.Microsecond), waits, 100*float64(wait)/float64(max(s.Wall, 1)))
	slices.SortFunc(ls, func(a, b layer) int { return a.il - b.il })
	fmt.Fprint(w, "gpu uploads per layer:")
	for _, l := range ls {
		fmt.Fprintf(w, " %d: %d B %.3f GB/s;", l.il, l.bytes, gbps(l.bytes, l.dur))
	}
	fmt.Fprintln(w)
}
