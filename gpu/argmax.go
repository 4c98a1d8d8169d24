//go:build cgo

package gpu

// argmax.go: greedy argmax and logits top-k on the device, so that a
// sampled token costs a readback of k (value, id) pairs per row instead of
// the whole vocabulary (model.TopKer). The order is the CPU sampler's:
// larger logit first, lower token id among equal logits; NaN ranks as
// -Inf. Reductions run in rounds of the topk shader, each cutting a row
// to k pairs per segment of topKSeg elements, until one segment is left
// (a 128256-token vocabulary: 126 segments, then 5, then 1).
// Not done here: bias, penalties, grammar masks or logprobs on the device
// (the caller decides from the sampler's settings whether k pairs decide
// the token, and reads the whole row otherwise).

import (
	"fmt"

	"github.com/flowinfer/flowinfer/gpu/shaders"
	"github.com/flowinfer/flowinfer/gpu/vk"
)

const (
	topKThreads = 32
	topKSeg     = 1024 // elements one invocation ranks
	// MaxTopK is the largest k TopK takes (the shader's MAXK): a greedy
	// token needs 1, the sampler's default top-k 40.
	MaxTopK = 64
)

// TopKPass records one round of the top-k reduction: for each of rows
// rows of n elements (stride elements apart, starting at src), the k best
// of each segment of topKSeg go to dstV and dstI at row·segs·k, best
// first. srcI nil means an element's id is its index in the row, else
// srcI holds the ids beside src. It returns segs, the number of segments
// per row (1: dstV, dstI hold each row's top k).
func (k *Kernels) TopKPass(cb *vk.CommandBuffer, dstV, dstI, src F32, srcI *F32, rows, n, stride, kk int) (int, error) {
	if rows <= 0 || n <= 0 || stride < n || kk < 1 || kk > MaxTopK {
		return 0, fmt.Errorf("gpu: TopK: %d rows of %d (stride %d), k %d (1 to %d)", rows, n, stride, kk, MaxTopK)
	}
	segs := (n + topKSeg - 1) / topKSeg
	groups := (segs + topKThreads - 1) / topKThreads
	lim := k.dev.Info().Limits.MaxComputeWorkGroupCount
	if uint32(groups) > lim[0] || uint32(rows) > lim[1] {
		return 0, fmt.Errorf("gpu: TopK: %d workgroups x %d rows exceed the device's workgroup limits", groups, rows)
	}
	so, err := floats("TopK source", src, (rows-1)*stride+n)
	if err != nil {
		return 0, err
	}
	hasIDs, ib := uint32(0), src.Buf
	if srcI != nil {
		if srcI.Off != src.Off {
			return 0, fmt.Errorf("gpu: TopK: ids at offset %d, values at %d (they share offsets)", srcI.Off, src.Off)
		}
		if _, err := floats("TopK source ids", *srcI, (rows-1)*stride+n); err != nil {
			return 0, err
		}
		hasIDs, ib = 1, srcI.Buf
	}
	out := rows * segs * kk
	do, err := floats("TopK values", dstV, out)
	if err != nil {
		return 0, err
	}
	if dstI.Off != dstV.Off {
		return 0, fmt.Errorf("gpu: TopK: ids out at offset %d, values at %d (they share offsets)", dstI.Off, dstV.Off)
	}
	if _, err := floats("TopK ids", dstI, out); err != nil {
		return 0, err
	}
	p, set, err := k.bind(shaders.TopK, 28, []uint32{topKThreads, topKSeg}, src.Buf, ib, dstV.Buf, dstI.Buf)
	if err != nil {
		return 0, err
	}
	cb.Dispatch(p, set, push(uint32(n), uint32(kk), so, uint32(stride), do, hasIDs, uint32(segs)), uint32(groups), uint32(rows), 1)
	return segs, nil
}

// topKBufs are a backend's buffers for TopK: two device-local pairs of
// value and id arrays the rounds alternate between, and the host-visible
// pair the last round writes.
type topKBufs struct {
	v, i   [2]*vk.Buffer
	outV   *vk.Buffer
	outI   *vk.Buffer
	pairs  int  // pairs each scratch buffer holds
	outLen int  // pairs each output buffer holds
	set    bool // SetTopK was called: max overrides the device type's choice
	max    int
}

// MaxTopK implements model.TopKer: MaxTopK, or 0 (read whole rows back)
// on a CPU-type device such as lavapipe, where a readback is a copy within
// RAM and measured cheaper than the reduction (BenchmarkTopK), unless
// SetTopK turned it on.
func (b *Backend) MaxTopK() int {
	if b.topk.set {
		return b.topk.max
	}
	if b.dev.Info().Type.String() == "cpu" {
		return 0
	}
	return MaxTopK
}

// SetTopK makes MaxTopK report MaxTopK (on) or 0 (off) whatever the
// device type.
func (b *Backend) SetTopK(on bool) {
	b.topk.set, b.topk.max = true, 0
	if on {
		b.topk.max = MaxTopK
	}
}

// TopK implements model.TopKer: for each of rows rows of nVocab logits
// (the device copy of logits, computed by earlier ops and not read back),
// the k largest with their ids go to vals and ids at row·k, best first,
// ties to the lower id, NaN as -Inf. Only the 8·rows·k bytes of the result
// leave the device. It returns (and clears) the first error of the ops
// since the last ToHost, like ToHost.
func (b *Backend) TopK(logits []float32, rows, nVocab, k int, ids []int32, vals []float32) error {
	if b.err != nil {
		return b.ToHost(nil)
	}
	if rows <= 0 || nVocab <= 0 || k < 1 || k > MaxTopK || len(logits) < rows*nVocab || len(ids) < rows*k || len(vals) < rows*k {
		return fmt.Errorf("gpu: TopK: %d rows of %d logits (%d given), k %d (1 to %d), room for %d ids and %d values",
			rows, nVocab, len(logits), k, MaxTopK, len(ids), len(vals))
	}
	src, err := b.in(logits[:rows*nVocab])
	if err != nil {
		return err
	}
	segs := (nVocab + topKSeg - 1) / topKSeg
	if err := b.topKBuffers(rows*segs*k, rows*k); err != nil {
		return err
	}
	t := &b.topk
	if err := b.record(); err != nil {
		return err
	}
	n, stride := nVocab, nVocab
	var srcI *F32
	for round := 0; ; round++ {
		dv, di := F32{Buf: t.v[round%2]}, F32{Buf: t.i[round%2]}
		if n <= topKSeg {
			dv, di = F32{Buf: t.outV}, F32{Buf: t.outI}
		}
		c, err := b.k.TopKPass(b.cb, dv, di, src, srcI, rows, n, stride, k)
		if err != nil {
			return err
		}
		if c == 1 {
			break
		}
		b.cb.Barrier()
		src, srcI = dv, &di
		n, stride = c*k, c*k
	}
	b.cb.HostBarrier()
	if err := b.flush(); err != nil {
		return err
	}
	copy(vals[:rows*k], f32s(t.outV.Bytes())[:rows*k])
	copy(ids[:rows*k], i32s(t.outI.Bytes())[:rows*k])
	return nil
}

// topKBuffers makes sure the scratch buffers hold pairs pairs and the
// output ones out pairs. Every buffer made goes to b.owned, which Close
// frees: an outgrown one stays until then (it is small, and growth stops
// at the largest batch).
func (b *Backend) topKBuffers(pairs, out int) error {
	t := &b.topk
	if t.pairs < pairs {
		for j := range 2 {
			for _, p := range []**vk.Buffer{&t.v[j], &t.i[j]} {
				nb, err := b.dev.NewBuffer(uint64(4*pairs), vk.DeviceLocal)
				if err != nil {
					return fmt.Errorf("gpu: TopK scratch of %d pairs: %w", pairs, err)
				}
				*p = nb
				b.owned = append(b.owned, nb)
			}
		}
		t.pairs = pairs
	}
	if t.outLen < out {
		for _, p := range []**vk.Buffer{&t.outV, &t.outI} {
			nb, err := b.dev.NewBuffer(uint64(4*out), vk.Readback)
			if err != nil {
				return fmt.Errorf("gpu: TopK output of %d pairs: %w", out, err)
			}
			*p = nb
			b.owned = append(b.owned, nb)
		}
		t.outLen = out
	}
	return nil
}
