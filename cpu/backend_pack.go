package cpu

// backend_pack.go: the Backend's packed weights. The kernels' packed
// layouts (kern_pack.go) make decode faster for some types; the Backend
// keeps one packed copy per weight matrix, keyed by the matrix's bytes, made
// the first time MatMul meets the matrix (or all at once by PackModel, in
// parallel), so model.Weight and the file mapping stay as they are.

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/flowinfer/flowinfer/io/nvme"
	"github.com/flowinfer/flowinfer/model"
)

// packKey identifies a weight matrix by its bytes.
type packKey struct {
	data *byte
	n    int
}

func keyOf(w *model.Weight) packKey { return packKey{unsafe.SliceData(w.Data), len(w.Data)} }

var _ model.Packer = (*Backend)(nil)

// PackedSize implements model.Packer: the size of w's packed form, 0 when
// the kernels have none or packing is off.
func (b *Backend) PackedSize(w *model.Weight) int {
	if b.NoPack {
		return 0
	}
	return b.k.PackedSize(w.Type, w.Rows, w.Cols)
}

// PackInto implements model.Packer. It is safe to call from other
// goroutines while the backend computes (it only reads w and writes dst).
func (b *Backend) PackInto(dst []byte, w *model.Weight) error {
	_, err := b.k.PackInto(dst, w.Type, w.Data, w.RowBytes, w.Rows, w.Cols)
	return err
}

// packedFor returns w's packed copy, packing it on first use; nil when the
// kernels have no packed form for it or packing is off. A weight whose
// Data is already packed (Weight.Packed, from PackInto) is viewed in
// place through view.
func (b *Backend) packedFor(w *model.Weight, view *Packed) *Packed {
	if w.Packed {
		return view.set(b.k.isa, w.Type, w.Rows, w.Cols, w.Data)
	}
	if b.NoPack {
		return nil
	}
	k := keyOf(w)
	if p, ok := b.packed[k]; ok {
		return p
	}
	var p *Packed
	if b.k.CanPack(w.Type, w.Rows, w.Cols) {
		p, _ = b.k.Pack(w.Type, w.Data, w.RowBytes, w.Rows, w.Cols) // CanPack checked the shape
	}
	b.packed[k] = p
	return p
}

// PackModel packs every weight matrix of m the kernels have a packed form
// for, on the backend's workers, and returns the bytes the copies take.
// Without it, matrices are packed when first used. With experts false the
// routed experts are left out (the weight path streams them and packs
// each into its cache slot); the matrices of the layers skip reports
// (routers excepted) too (layers the weight path streams). skip may be nil.
func (b *Backend) PackModel(m *model.Model, experts bool, skip func(il int) bool) (int64, error) {
	if b.NoPack {
		return 0, nil
	}
	var ws []*model.Weight
	add := func(w *model.Weight) {
		if w == nil {
			return
		}
		if _, ok := b.packed[keyOf(w)]; !ok {
			ws = append(ws, w)
		}
	}
	add(m.Output)
	for i := range m.Layers {
		L := &m.Layers[i]
		add(L.Router)
		if skip == nil || !skip(i) {
			for _, w := range []*model.Weight{L.Wq, L.Wk, L.Wv, L.Wo, L.Gate, L.Up, L.Down} {
				add(w)
			}
		}
		if !experts {
			continue
		}
		for _, e := range [][]model.Weight{L.GateExps, L.UpExps, L.DownExps} {
			for j := range e {
				add(&e[j])
			}
		}
	}
	out := make([]*Packed, len(ws))
	errs := make([]error, len(ws))
	var wg sync.WaitGroup
	next := make(chan int, len(ws))
	for i := range ws {
		next <- i
	}
	close(next)
	for range b.workers.count() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				w := ws[i]
				if b.k.CanPack(w.Type, w.Rows, w.Cols) {
					out[i], errs[i] = b.k.Pack(w.Type, w.Data, w.RowBytes, w.Rows, w.Cols)
					if errs[i] == nil && b.DropPacked {
						// the copy replaces the mapped pages now, not
						// after the whole model: the peak stays one copy
						nvme.DropPages(w.Data)
					}
				}
			}
		}()
	}
	wg.Wait()
	var total int64
	for i, w := range ws {
		if errs[i] != nil {
			return total, fmt.Errorf("cpu: packing %s: %w", w.Name, errs[i])
		}
		b.packed[keyOf(w)] = out[i]
		if out[i] != nil {
			total += int64(out[i].Bytes())
		}
	}
	return total, nil
}

// MatMulBytes returns the bytes MatMul reads for w: its packed copy if the
// backend has made one (or w.Data is packed), else w.Data. It packs
// nothing. Not safe while the backend computes.
func (b *Backend) MatMulBytes(w *model.Weight) []byte {
	if p := b.packed[keyOf(w)]; p != nil && !w.Packed {
		return p.data
	}
	return w.Data
}
