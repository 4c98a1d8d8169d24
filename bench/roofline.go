package bench

// roofline.go: the decode ceiling. A decode step reads every weight matrix
// once (MoE: the router, and the active experts), so tokens per second
// cannot exceed read bandwidth / bytes read per token. BandwidthProbe
// measures the first on this machine (a STREAM-style read: threads scan
// disjoint parts of memory much larger than the caches, the weights
// themselves in bench --roofline, with SIMD instructions); DecodeBytes
// counts the second from the model. At depth, attention's arithmetic can
// take longer than its bytes: AttentionFLOPs counts it, ComputePeak
// measures the float32 FMA peak it is held to.

import (
	"bytes"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flowinfer/flowinfer/model"
)

// DecodeBytes returns the weight bytes one single-token decode step reads
// at position pos: every matrix of every layer (for MoE, the router plus
// NExpertUsed of NExpert experts' share), the output matrix, one embedding
// row, and the K and V cache rows of positions 0..pos, kvPerToken bytes
// each (model.KVBytesPerToken of the cache's types).
func DecodeBytes(m *model.Model, kvPerToken int, pos int) int64 {
	var n int64
	size := func(w *model.Weight) {
		if w != nil {
			n += int64(len(w.Data))
		}
	}
	size(m.Output)
	n += int64(m.TokEmbd.RowBytes)
	for i := range m.Layers {
		L := &m.Layers[i]
		for _, w := range L.Matrices() {
			size(*w)
		}
		var exp int64
		for _, e := range L.Experts() {
			for j := range e {
				exp += int64(len(e[j].Data))
			}
		}
		if m.NExpert > 0 {
			n += exp * int64(m.NExpertUsed) / int64(m.NExpert)
		}
	}
	n += int64(pos+1) * int64(kvPerToken)
	return n
}

// AttentionFLOPs returns the floating-point operations of one single-token
// decode step's attention at position pos: for every layer and query head,
// a dot product with each cached K row (2·dk) and a multiply-add of each V
// row (2·dv), positions 0..pos. The softmax is left out. With a quantized
// cache this arithmetic, not the cache's bytes, bounds attention on a few
// cores (bench --roofline prints both).
func AttentionFLOPs(h *model.Hyper, pos int) float64 {
	return float64(h.NLayer) * float64(h.NHead) * 2 * float64(h.HeadDimK+h.HeadDimV) * float64(pos+1)
}

// AttentionOps splits AttentionFLOPs(h, pos) by the arithmetic that does
// it in a cache of types t: the K scores (v false) and V sums (v true) of
// each layer's rows that integer says are computed in integers (the CPU
// kernels: cpu.IntegerKV) go to intK and intV, the rest (--kv-recent's
// f16 copies among them) to flt. 2 operations per multiply-add, as
// AttentionFLOPs.
func AttentionOps(h *model.Hyper, t model.KVTypes, pos int, integer func(t model.KVType, v bool) bool) (flt, intK, intV float64, err error) {
	ls, err := model.KVLayers(h, t)
	if err != nil {
		return 0, 0, 0, err
	}
	all, recent := float64(pos+1), float64(t.RecentRows(pos))
	for _, l := range ls {
		for _, v := range []bool{false, true} {
			kt, x, dim, acc := l.K, l.RecentK, h.HeadDimK, &intK
			if v {
				kt, x, dim, acc = l.V, l.RecentV, h.HeadDimV, &intV
			}
			ops := float64(h.NHead) * 2 * float64(dim) // per position
			n := all                                   // positions in integers
			if x {
				n -= recent
			}
			if !integer(kt, v) {
				n = 0
			}
			*acc += ops * n
			flt += ops * (all - n)
		}
	}
	return flt, intK, intV, nil
}

// ComputePeak runs run on threads goroutines at once, reps times, and
// returns the best rate in operations per second: run does a fixed amount
// of work and returns the operations it did (cpu.Kernels.FMAPeak: float32
// FLOPs of independent FMAs). 0 if run does nothing (a path without such
// a loop).
func ComputePeak(run func() float64, threads, reps int) float64 {
	threads = max(threads, 1)
	best := 0.0
	for range max(reps, 1) {
		ops := make([]float64, threads)
		var wg sync.WaitGroup
		t0 := time.Now()
		for i := range threads {
			wg.Go(func() { ops[i] = run() })
		}
		wg.Wait()
		sec := time.Since(t0).Seconds()
		var n float64
		for _, o := range ops {
			n += o
		}
		if sec > 0 {
			best = max(best, n/sec)
		}
	}
	return best
}

// BandwidthProbe measures read bandwidth over memory it is given, so that
// it can be measured again and again during a run.
//
// On the virtual machines we measure on, a scan's bandwidth switches
// between about 30 and 43-55 GB/s every few minutes (the host's), while
// decode speed moves by a few percent with it: one figure taken minutes
// from a test says little about it. So bench --roofline scans the very
// bytes a decode step reads, its weight matrices as the backend holds
// them (ProbeRegions), right before each repetition.
type BandwidthProbe struct {
	regions [][]byte
	size    int
	threads int
}

// ProbeRegions returns a probe that scans regions (read only) with
// threads readers, each a contiguous share of their concatenation.
func ProbeRegions(regions [][]byte, threads int) *BandwidthProbe {
	p := &BandwidthProbe{threads: max(threads, 1)}
	for _, r := range regions {
		if len(r) > 0 {
			p.regions = append(p.regions, r)
			p.size += len(r)
		}
	}
	return p
}

// Size returns the bytes one pass scans.
func (p *BandwidthProbe) Size() int { return p.size }

// Measure returns the best of reps passes over the regions, in bytes per
// second.
func (p *BandwidthProbe) Measure(reps int) float64 {
	if p.size == 0 {
		return 0
	}
	best := 0.0
	for range max(reps, 1) {
		var wg sync.WaitGroup
		t0 := time.Now()
		for w := range p.threads {
			wg.Go(func() { p.scan(w*p.size/p.threads, (w+1)*p.size/p.threads) })
		}
		wg.Wait()
		best = max(best, float64(p.size)/time.Since(t0).Seconds())
	}
	return best
}

// sink keeps scan's result observable.
var sink atomic.Int64

// scan reads bytes [lo, hi) of the regions' concatenation: bytes.Count of
// one byte value runs a SIMD loop over every byte, a pure read stream.
func (p *BandwidthProbe) scan(lo, hi int) {
	n, off := 0, 0
	for _, r := range p.regions {
		end := off + len(r)
		if lo < end && off < hi {
			n += bytes.Count(r[max(lo-off, 0):min(hi-off, len(r))], []byte{0x5a})
		}
		off = end
	}
	sink.Add(int64(n))
}
