package stages

// tiers.go: the weight tiers of routed experts (VRAM -> RAM -> disk) as
// counts of the experts steps needed, by the tier that served each: a
// device slot (the Vulkan backend's expert store), the RAM expert cache
// (expertcache.go), or a read of the model file. Compute records them per
// step as counters of its stage ("experts needed", "expert vram hits",
// "expert vram misses", and the expert cache's "expert hits" and "expert
// misses"); ExpertTiersOf adds them up from a recorder's summary.

import "github.com/flowinfer/flowinfer/graph"

// ExpertTiers counts routed experts by the tier that served them. A
// device slot's miss is filled from the model's bytes on the host, which
// on the device path are the file's mapping (the page cache or the disk:
// counted as disk); on the CPU a RAM expert cache miss is a disk read.
type ExpertTiers struct {
	Needed int64 // routed experts the steps ran (one per expert and layer of a step)
	VRAM   int64 // found in a device slot
	RAM    int64 // found in the RAM expert cache
	Disk   int64 // read from the model file
	Steps  int64 // steps that ran routed experts
}

// deviceSlots is a backend that keeps routed experts in device slots
// (gpu.Backend).
type deviceSlots interface {
	ExpertLookups() (hits, misses int64)
}

// Counter names of the compute stage.
const (
	counterNeeded     = "experts needed"
	counterVRAMHits   = "expert vram hits"
	counterVRAMMisses = "expert vram misses"
	counterRAMHits    = "expert hits"   // the expert cache's (Fetch)
	counterRAMMisses  = "expert misses" // the expert cache's (Fetch)
)

// ExpertTiersOf returns the tiers from the compute stage's counters in
// sum, and false when no step ran routed experts (or nothing was
// recorded).
func ExpertTiersOf(sum graph.Summary) (ExpertTiers, bool) {
	for _, s := range sum {
		n, ok := s.Counters[counterNeeded]
		if !ok {
			continue
		}
		c := func(name string) int64 { return s.Counters[name].Sum }
		return ExpertTiers{
			Needed: n.Sum, Steps: n.Count,
			VRAM: c(counterVRAMHits), RAM: c(counterRAMHits),
			Disk: c(counterRAMMisses) + c(counterVRAMMisses),
		}, true
	}
	return ExpertTiers{}, false
}
