// stream.go: writing one tensor's random data in chunks. Each chunk has its
// own generator seeded from (seed, tensor name, chunk index), so chunks can
// be generated in parallel and the bytes do not depend on how many workers
// there are.

package synth

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
)

// chunkBytes is the target size of one generated chunk.
const chunkBytes = 1 << 20

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// chunkRand returns the generator of chunk i of the named tensor.
func chunkRand(seed uint64, name string, i int) *rand.PCG {
	h := fnv.New64a()
	h.Write([]byte(name))
	s1 := splitmix(seed ^ splitmix(h.Sum64()))
	return rand.NewPCG(s1, splitmix(s1^uint64(i)))
}

// tensorWriter returns the function that writes t's data; generators and
// their tables are built now, in c, so the writing goroutines only read
// them.
func tensorWriter(c *gens, t *Tensor, seed uint64) (func(io.Writer) error, error) {
	if strings.HasSuffix(t.Name, fusedGateUp) {
		return fusedWriter(c, t, seed)
	}
	if t.role != roleWeight {
		if c.floats == nil {
			c.floats, c.floatMS = floatTable()
		}
		k := float32(t.std / math.Sqrt(c.floatMS))
		return func(w io.Writer) error { return writeSmall(w, t, c.floats, k, seed) }, nil
	}
	g, err := c.get(t.Type, t.std)
	if err != nil {
		return nil, err
	}
	return func(w io.Writer) error {
		bb := uint64(t.Type.BlockBytes())
		blocks := t.Bytes / bb
		per := max(1, chunkBytes/bb)
		n := int((blocks + per - 1) / per)
		size := func(i int) int { return int(min(per, blocks-uint64(i)*per) * bb) }
		gen := func(i int, dst []byte) { g.fillBlocks(chunkRand(seed, t.Name, i), dst) }
		return stream(w, n, runtime.GOMAXPROCS(0), size, gen)
	}, nil
}

// fusedGateUp ends the name of a fused gate and up experts tensor
// (HybridSpec.FusedGateUpExps).
const fusedGateUp = "ffn_gate_up_exps.weight"

// fusedWriter returns the function that writes a fused ffn_gate_up_exps:
// the bytes of the ffn_gate_exps and ffn_up_exps tensors the same spec
// would write split (same names, so the same generators), generated whole
// in memory, then per expert its gate's rows and its up's.
func fusedWriter(c *gens, t *Tensor, seed uint64) (func(io.Writer) error, error) {
	if len(t.Dims) != 3 || t.Dims[1]%2 != 0 {
		return nil, fmt.Errorf("synth: tensor %q: want [cols, 2·rows, experts], have %v", t.Name, t.Dims)
	}
	prefix := strings.TrimSuffix(t.Name, fusedGateUp)
	half := *t
	half.Dims = []uint64{t.Dims[0], t.Dims[1] / 2, t.Dims[2]}
	half.Bytes = t.Bytes / 2
	gate, up := half, half
	gate.Name, up.Name = prefix+"ffn_gate_exps.weight", prefix+"ffn_up_exps.weight"
	var fills [2]func(io.Writer) error
	for i, h := range []*Tensor{&gate, &up} {
		f, err := tensorWriter(c, h, seed)
		if err != nil {
			return nil, err
		}
		fills[i] = f
	}
	return func(w io.Writer) error {
		var bufs [2]bytes.Buffer
		for i := range bufs {
			bufs[i].Grow(int(half.Bytes))
			if err := fills[i](&bufs[i]); err != nil {
				return err
			}
		}
		n := int(t.Dims[2])
		per := int(half.Bytes) / n // one expert's gate (or up)
		for e := range n {
			for i := range bufs {
				if _, err := w.Write(bufs[i].Bytes()[e*per : (e+1)*per]); err != nil {
					return err
				}
			}
		}
		return nil
	}, nil
}

// writeSmall writes the F32 norms, biases and router (small: one chunk):
// z·k with z from the float table, plus 1 for norms, times a per-expert
// scale for the router.
func writeSmall(w io.Writer, t *Tensor, table *[65536]float32, k float32, seed uint64) error {
	r := chunkRand(seed, t.Name, 0)
	cols := int(t.Dims[0])
	rows := int(t.Bytes) / 4 / cols
	scale := make([]float32, rows)
	for i := range scale {
		scale[i] = 1
	}
	if t.role == roleRouter && t.sigma > 0 {
		// scale_e = exp(σ·z), z ~ N(0, 1) by Box-Muller
		for e := range scale {
			u1 := (float64(r.Uint64()>>11) + 0.5) / (1 << 53)
			u2 := float64(r.Uint64()>>11) / (1 << 53)
			z := math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
			scale[e] = float32(math.Exp(t.sigma * z))
		}
	} else if t.role == roleRouter {
		// per-expert scales as the golden qwen3moe: {6, 4, 3, 2, 1.5, 1,
		// 0.5, 0.25} repeated, shuffled per layer, so a few experts win
		base := [...]float32{6, 4, 3, 2, 1.5, 1, 0.5, 0.25}
		for e := range scale {
			scale[e] = base[e%len(base)]
		}
		for i := len(scale) - 1; i > 0; i-- {
			j := int((r.Uint64() >> 32) * uint64(i+1) >> 32)
			scale[i], scale[j] = scale[j], scale[i]
		}
	}
	boosted := map[int]bool{}
	if t.boost > 0 {
		// the outlier channels: distinct, drawn from the tensor's own stream
		// after its values' (so the other channels are unchanged)
		rb := chunkRand(seed, t.Name+"/outliers", 0)
		for len(boosted) < min(kOutlierChannels, cols) {
			boosted[int((rb.Uint64()>>32)*uint64(cols)>>32)] = true
		}
	}
	buf := make([]byte, 4*cols)
	for row := range rows {
		for c := range cols {
			v := float32(table[r.Uint64()&0xffff] * k) // rounded: no fused add below
			switch t.role {
			case roleNorm:
				if t.base != 0 {
					v = float32(t.base) + v
				} else {
					v = 1 + v
				}
				if boosted[c] {
					v *= float32(t.boost)
				}
			case roleRouter:
				v *= scale[row]
			case roleNegNorm:
				v = -(1 + v)
			case roleRopeFreqs:
				v = 1
				if c >= t.rot {
					v = 1e30
				}
			}
			binary.LittleEndian.PutUint32(buf[4*c:], math.Float32bits(v))
		}
		if _, err := w.Write(buf); err != nil {
			return err
		}
	}
	return nil
}

// stream writes chunks 0..n-1 to w in order. Chunk i has size(i) bytes and
// is produced by gen(i, buf); up to workers chunks are generated at once,
// the next batch while the current one is written.
func stream(w io.Writer, n, workers int, size func(i int) int, gen func(i int, dst []byte)) error {
	workers = max(1, min(workers, n))
	if workers == 1 {
		var buf []byte
		for i := range n {
			buf = grow(buf, size(i))
			gen(i, buf)
			if _, err := w.Write(buf); err != nil {
				return err
			}
		}
		return nil
	}
	type batch struct {
		bufs  [][]byte
		first int
		wg    sync.WaitGroup
	}
	start := func(b *batch, first int) {
		b.first = first
		b.bufs = b.bufs[:min(workers, n-first)]
		for j := range b.bufs {
			b.bufs[j] = grow(b.bufs[j], size(first+j))
			b.wg.Add(1)
			go func() {
				defer b.wg.Done()
				gen(first+j, b.bufs[j])
			}()
		}
	}
	cur, next := &batch{bufs: make([][]byte, workers)}, &batch{bufs: make([][]byte, workers)}
	start(cur, 0)
	for {
		cur.wg.Wait()
		more := cur.first+len(cur.bufs) < n
		if more {
			next.bufs = next.bufs[:workers]
			start(next, cur.first+len(cur.bufs))
		}
		for _, buf := range cur.bufs {
			if _, err := w.Write(buf); err != nil {
				next.wg.Wait()
				return err
			}
		}
		if !more {
			return nil
		}
		cur, next = next, cur
	}
}

// grow returns buf resized to n bytes.
func grow(buf []byte, n int) []byte {
	if cap(buf) < n {
		return make([]byte, n)
	}
	return buf[:n]
}
