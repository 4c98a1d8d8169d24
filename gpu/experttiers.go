//go:build cgo

package gpu

// experttiers.go: the device expert slots as the VRAM tier of the weight
// tiers (VRAM -> RAM -> disk): the engine's compute stage reads these two
// counters around each step to count the step's experts by the tier that
// served them.

// ExpertLookups returns the device expert slots' lookups since the
// backend opened: hits (the expert was in a slot) and misses (it was
// uploaded into one from the model's bytes on the host). Both are 0
// without routed experts.
func (b *Backend) ExpertLookups() (hits, misses int64) {
	if b.experts == nil {
		return 0, 0
	}
	return b.experts.hits.Load(), b.experts.misses.Load()
}
