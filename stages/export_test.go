package stages

import (
	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/model"
)

// OwnRanges returns the file ranges OwnResident would own.
func (w *WeightPath) OwnRanges(packed func(*model.Weight) bool) []gguf.Range {
	return w.ownRanges(packed)
}

// ForceLayerStreaming makes a weight path stream every layer but the first
// resident through slots layer slots, whatever the budget (the golden
// models are smaller than the smallest budget that would make them
// stream).
func ForceLayerStreaming(cfg *WeightConfig, resident, slots int) {
	cfg.force = &layerForce{resident: resident, slots: slots}
}
