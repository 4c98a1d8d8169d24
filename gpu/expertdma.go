//go:build cgo

package gpu

// expertdma.go: the uploader of missed experts (a VRAM budget with fewer
// expert slots than experts). A miss's bytes are copied by the host into a
// host-visible staging slab, and a transfer command buffer copies them
// into the expert's slot (vkCmdCopyBuffer on the transfer queue where the
// device has a family of its own, else a second submission on the
// compute queue). The products of a layer's experts are ordered hits
// first: a hit's products are recorded in the compute command buffer at
// once, a miss's are deferred. When the layer's experts are done (SumRows,
// or any submission before it) the batch is drained: the compute work
// recorded so far (the hits) is submitted without a host wait, the
// transfer is submitted signalling the next value of a timeline
// semaphore, and the misses' products are recorded into the second
// compute command buffer, whose submission waits for that value. On a
// separate transfer family the slots' ranges change queue family: the
// transfer command buffer releases them, the compute one acquires them
// (vk.ReleaseToCompute, vk.AcquireFromTransfer).
//
// A slot the batch reads (a hit's, or a miss being uploaded) is pinned:
// when a miss's victim is pinned (few slots) or the slab is full, the
// batch is drained and waited for before the slot or slab is written
// again, and so is a new batch begun before the last one's products were
// submitted (its upload could overtake them on a separate queue). Every
// upload is thus written after the host saw the compute work that last
// read its slot, and the last upload from the slab, complete.
//
// With device timing on (timestamps.go) and transfers on the compute
// queue, each drain reports a "gpu:upload-<layer>" span timed by
// timestamps around the copies (with its bytes) and a
// "gpu:upload-wait-<layer>" span from the end of the hits' products to the
// end of the upload (the time compute waited for the upload before the
// misses' products could run). A device without timeline semaphores
// uploads inside the compute command buffer (expertstore.go's head
// comment). Not done: timing of uploads on a separate transfer queue (its
// family may have no timestamps, and the query pool is reset on the
// compute queue).

import (
	"errors"
	"fmt"
	"time"

	"github.com/flowinfer/flowinfer/gpu/vk"
	"github.com/flowinfer/flowinfer/model"
)

// minSlab is the staging slab's least size (it holds two slots at least).
const minSlab = 16 << 20

// uploader is the state of the expert uploads.
type uploader struct {
	cb        *vk.CommandBuffer // transfer queue
	spare     *vk.CommandBuffer // the compute command buffer not in b.cb
	sem       *vk.Timeline
	slab      *vk.Buffer // host-visible staging for missed experts
	use       int        // bytes of the slab the batch holds
	recording bool       // cb is recording the batch's copies
	value     uint64     // the timeline's last value submitted
	batch     []slotFill
	bytes     int64          // the batch's bytes
	layer     int            // the batch's layer (the last miss's)
	pinned    map[int32]bool // slots the batch's products read
	split     bool           // b.cb follows a compute submission no host wait has covered
	waitV     uint64         // the value b.cb's submission waits for (0: none)
	q0        int            // the batch's first transfer timestamp query (-1: untimed)
}

// slotFill is a miss of the batch: the slot range its copy writes and the
// recording of its products.
type slotFill struct {
	buf      *vk.Buffer
	off, n   uint64
	products func() error
}

// newUploader makes the uploader for a store of slotBytes slots, or nil
// when the device has no timeline semaphores.
func (b *Backend) newUploader(slotBytes int) (*uploader, error) {
	if !b.dev.Info().TimelineSemaphore {
		return nil, nil
	}
	u := &uploader{pinned: map[int32]bool{}, q0: -1}
	var err error
	if u.sem, err = b.dev.NewTimeline(0); errors.Is(err, vk.ErrUnsupported) {
		return nil, nil // the driver lacks the calls: uploads in the compute command buffer
	} else if err != nil {
		return nil, err
	}
	b.up = u // Close frees what was made if the rest fails
	if u.cb, err = b.dev.NewCommandBuffer(vk.Transfer); err != nil {
		return nil, err
	}
	if u.spare, err = b.dev.NewCommandBuffer(vk.Compute); err != nil {
		return nil, err
	}
	n := max(minSlab, 2*slotBytes)
	if u.slab, err = b.dev.NewBuffer(uint64(n), vk.Upload); err != nil {
		return nil, fmt.Errorf("gpu: expert staging slab of %d bytes: %w", n, err)
	}
	return u, nil
}

// closeUploader frees the uploader (the device is idle).
func (b *Backend) closeUploader() {
	u := b.up
	if u == nil {
		return
	}
	if u.recording {
		u.cb.End()
	}
	if u.cb != nil {
		u.cb.Free()
	}
	if u.spare != nil {
		u.spare.Free()
	}
	if u.sem != nil {
		u.sem.Destroy()
	}
	if u.slab != nil {
		u.slab.Free()
	}
	b.up = nil
}

// pin marks slot i as read by the batch's products; a slot already pinned
// (a miss's victim the batch still reads) drains the batch and waits for
// it first.
func (b *Backend) pin(i int32) error {
	u := b.up
	if u.pinned[i] {
		if err := b.flush(); err != nil {
			return err
		}
	}
	u.pinned[i] = true
	return nil
}

// dmaFill copies an expert's three matrices into the staging slab and
// records their copies into slot i on the transfer command buffer; the
// products go into the batch (drainExperts records them).
func (b *Backend) dmaFill(i int32, il int, ws [3]*model.Weight, products func() error) error {
	s, u := b.experts, b.up
	st := &s.slots[i]
	off, n, err := slotWeights(ws, s.slotBytes)
	if err != nil {
		return err
	}
	// a full slab is the batch's until its upload ran; after a drain
	// whose products are not submitted yet, a new upload could overtake
	// them on a separate queue
	if u.use+n > int(u.slab.Size()) || (!u.recording && u.split) {
		if err := b.flush(); err != nil {
			return err
		}
	}
	if err := b.pin(i); err != nil {
		return err
	}
	if err := b.record(); err != nil { // the submission's timestamp queries are reset
		return err
	}
	if !u.recording {
		if err := u.cb.Begin(); err != nil {
			return err
		}
		u.recording = true
		u.q0 = b.timerUpload()
	}
	buf, base := s.place(i)
	start := time.Now()
	at := u.use
	for j, w := range ws {
		nb := w.Rows * w.RowBytes
		copy(u.slab.Bytes()[at+off[j]:], w.Data[:nb])
		u.cb.Copy(buf, uint64(base+off[j]), u.slab, uint64(at+off[j]), uint64(nb))
		st.w[j] = Weight{Buf: buf, Off: base + off[j], Type: w.Type, Rows: w.Rows, Cols: w.Cols}
		s.upBytes.Add(int64(nb))
		u.bytes += int64(nb)
	}
	s.upNanos.Add(time.Since(start).Nanoseconds())
	u.use = (at + n + 255) &^ 255
	u.layer = il
	u.batch = append(u.batch, slotFill{buf: buf, off: uint64(base), n: uint64(n), products: products})
	st.valid = true
	return nil
}

// drainExperts submits the batch's upload and records its misses'
// products after the hits' (see the file's head comment). The next
// compute submission waits for the upload.
func (b *Backend) drainExperts() error {
	u := b.up
	if u == nil {
		return nil
	}
	if len(u.batch) == 0 {
		clear(u.pinned)
		return nil
	}
	batch := u.batch
	u.batch = u.batch[:0]
	defer func() {
		clear(u.pinned)
		u.use, u.bytes = 0, 0
	}()
	for _, f := range batch {
		u.cb.ReleaseToCompute(f.buf, f.off, f.n)
	}
	q1 := b.timerUploadEnd(u.q0)
	u.recording = false
	if err := u.cb.End(); err != nil {
		return err
	}
	if err := b.record(); err != nil {
		return err
	}
	qa := -1
	if !u.split {
		// the hits' products (and what came before) run while the misses upload
		qa = b.timerStamp()
		if err := b.cb.End(); err != nil {
			b.recording = false
			return err
		}
		if err := b.dev.Submit(b.cb, b.waits(), nil, nil); err != nil {
			b.recording = false
			return err
		}
		b.cb, u.spare = u.spare, b.cb
		u.split, u.waitV = true, 0
		if err := b.cb.Begin(); err != nil {
			b.recording = false
			return err
		}
	}
	v := u.value + 1
	if err := b.dev.Submit(u.cb, nil, []vk.SemaphoreValue{{Sem: u.sem, Value: v}}, nil); err != nil {
		return err
	}
	u.value, u.waitV = v, v
	b.timerUploadSpans(u.layer, u.bytes, u.q0, q1, qa)
	for _, f := range batch {
		b.cb.AcquireFromTransfer(f.buf, f.off, f.n)
	}
	b.cb.Barrier() // the hits' writes, submitted earlier, before the products
	for _, f := range batch {
		if err := f.products(); err != nil {
			return err
		}
	}
	return nil
}

// abortUploads leaves the uploader consistent after a failed drain or
// submission: its command buffer not recording, no batch, and nothing
// waiting on an upload that was not submitted. It waits for the device.
func (b *Backend) abortUploads() {
	u := b.up
	if u == nil {
		return
	}
	if u.recording {
		u.cb.End()
		u.recording = false
	}
	b.dev.WaitIdle()
	u.batch = u.batch[:0]
	clear(u.pinned)
	u.use, u.bytes = 0, 0
	u.split, u.waitV = false, 0
}

// waits is what the compute submission of b.cb waits for: the last
// upload its products read.
func (b *Backend) waits() []vk.SemaphoreValue {
	if u := b.up; u != nil && u.waitV > 0 {
		return []vk.SemaphoreValue{{Sem: u.sem, Value: u.waitV}}
	}
	return nil
}

// uploaded is called once a fence wait covered every submission.
func (b *Backend) uploaded() {
	if u := b.up; u != nil {
		u.split, u.waitV = false, 0
	}
}

// slotWeights checks an expert's matrices against a slot of slotBytes
// and returns their offsets in it and its bytes.
func slotWeights(ws [3]*model.Weight, slotBytes int) ([3]int, int, error) {
	off, n := slotLayout(ws[0], ws[1], ws[2])
	if n > slotBytes {
		return off, n, fmt.Errorf("gpu: expert of %d bytes beyond the slots' %d", n, slotBytes)
	}
	for _, w := range ws {
		if w.Packed {
			return off, n, fmt.Errorf("gpu: expert weight %q: %w: a backend-packed layout", w.Name, vk.ErrUnsupported)
		}
		if !SupportsMatVec(w.Type) {
			return off, n, fmt.Errorf("gpu: expert weight %q: %w: no shader for type %s", w.Name, vk.ErrUnsupported, w.Type)
		}
		if nb := w.Rows * w.RowBytes; len(w.Data) < nb {
			return off, n, fmt.Errorf("gpu: expert weight %q: %d bytes for %d rows of %d", w.Name, len(w.Data), w.Rows, w.RowBytes)
		}
	}
	return off, n, nil
}
