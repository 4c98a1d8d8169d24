package gpu

// expertstats.go: the device expert slots' counters (expertstore.go), in
// a file without cgo so that commands print them on any build.

// ExpertStats are the device expert slots' counters since the backend
// opened: lookups count from the first step (a resident store's uploads
// at load count in the upload figures only).
type ExpertStats struct {
	Slots, Cached int   // slots, and slots holding an expert
	SlotBytes     int64 // bytes of one slot
	Hits, Misses  int64 // lookups of an expert found in a slot, or uploaded
	Evictions     int64
	UploadBytes   int64 // bytes uploaded into slots (at load and on misses)
	UploadNanos   int64 // host time of those uploads: copies into the staging ring, and the submissions that waited for a full ring to drain
}

// HitRate returns hits over lookups (0 without lookups).
func (s ExpertStats) HitRate() float64 {
	if s.Hits+s.Misses == 0 {
		return 0
	}
	return float64(s.Hits) / float64(s.Hits+s.Misses)
}
