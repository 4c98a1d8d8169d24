package stages

import (
	"github.com/flowinfer/flowinfer/graph"
	"github.com/flowinfer/flowinfer/model"
)

// timeDevice turns on the device's own timing of the compute stage's
// spans when the backend has one (model.DeviceTimer, the Vulkan backend):
// each span layerSpans opens is also marked in the device's work, and
// comes back, timed by the device, as a work span ("gpu:attn-3") on a
// lane beside compute's track; each time the host blocked on the device
// is a "gpu-wait" sub-span of compute. The backend's own spans (its expert
// uploads, "gpu:upload-3", with a counter of the same name holding their
// bytes, and "gpu:upload-wait-3", the device's compute waiting for one)
// are work spans too. It returns what turns timing off
// (nil when the backend has no device timing: the trace command says why).
func timeDevice(rec *graph.Recorder, stg *graph.Stage, ops model.Ops, ls *layerSpans) func() {
	dt, ok := ops.(model.DeviceTimer)
	if !ok || dt.DeviceTiming() != nil {
		return nil
	}
	err := dt.TimeDevice(func(sp model.DeviceSpan) {
		if sp.Wait {
			rec.SpanAt(stg, sp.Name, sp.Start, sp.End)
			return
		}
		rec.WorkAt(stg, sp.Name, sp.Start, sp.End)
		if sp.Bytes > 0 { // an upload's bytes, counted under its span's name
			rec.Add(stg, sp.Name, sp.Bytes)
		}
	})
	if err != nil {
		return nil
	}
	ls.dev, ls.gpuNames = dt, map[string][]string{}
	return func() { dt.TimeDevice(nil) }
}
