//go:build cgo

package gpu

// timestamps.go: the device's own timing of the backend's work
// (model.DeviceTimer). Each submission starts with a reset of a pool of
// timestamp queries and a timestamp; MarkDevice writes one where a span
// begins or ends (vkCmdWriteTimestamp at the bottom of the pipe: when
// every earlier command has finished, and ops are separated by barriers),
// and flush writes one last before the submission ends. Once its fence
// signals, the ticks (times timestampPeriod, masked to timestampValidBits)
// become spans on the host clock, anchored so that the last timestamp
// falls when the host saw the fence signal: a span is placed at most the
// host's wake-up latency late, and its length is the device's. Each
// fence wait is also reported, as a Wait span: the host stalled on the
// device. A span still open at a submission's end keeps its start (on the
// host clock) and ends in a later submission.
//
// Expert uploads (expertdma.go) write their timestamps into the same
// pool from the transfer command buffer, submitted on the compute queue
// after the reset, when transfers share the compute queue's family.
//
// Not done: calibrated timestamps (VK_EXT_calibrated_timestamps) that
// would place device spans on the host clock without the anchor; timing
// of transfers on a separate queue.

import (
	"fmt"
	"time"

	"github.com/flowinfer/flowinfer/gpu/vk"
	"github.com/flowinfer/flowinfer/model"
)

var _ model.DeviceTimer = (*Backend)(nil)

// tsQueries is the size of the query pool: the timestamps one submission
// holds. A submission that fills it is submitted early (MarkDevice).
const tsQueries = 4096

// devTimer is the state of device timing while it is on.
type devTimer struct {
	pool   *vk.QueryPool
	sink   func(model.DeviceSpan)
	used   uint32       // queries written in the submission being recorded
	closed []closedSpan // spans closed in it
	open   []openSpan   // spans open, innermost last
	ticks  []uint64     // scratch
}

// closedSpan is a span whose end is query q1 of the current submission and
// whose start is query q0, or start when q0 < 0 (begun in an earlier one).
type closedSpan struct {
	name   string
	q0     int
	q1     uint32
	start0 time.Time
	bytes  int64 // an upload's bytes (expertdma.go)
}

type openSpan struct {
	name  string
	q     int // the begin query in the current submission, -1: start holds it
	start time.Time
}

// DeviceTiming implements model.DeviceTimer: timing needs timestamps on
// the compute queue and a nonzero timestamp period.
func (b *Backend) DeviceTiming() error {
	info := b.dev.Info()
	if bits := b.dev.TimestampBits(vk.Compute); bits == 0 {
		return fmt.Errorf("gpu: %w: device %q: the compute queue family has no timestamps (timestampValidBits 0)", vk.ErrUnsupported, info.Name)
	}
	if !(info.TimestampPeriod > 0) {
		return fmt.Errorf("gpu: %w: device %q: timestampPeriod %v", vk.ErrUnsupported, info.Name, info.TimestampPeriod)
	}
	return nil
}

// TimeDevice implements model.DeviceTimer. Turning timing on or off
// submits what is recorded first.
func (b *Backend) TimeDevice(sink func(model.DeviceSpan)) error {
	if sink != nil {
		if err := b.DeviceTiming(); err != nil {
			return err
		}
	}
	if err := b.flush(); err != nil {
		return err
	}
	if sink == nil {
		b.closeTimer()
		return nil
	}
	if b.timer == nil {
		pool, err := b.dev.NewQueryPool(tsQueries)
		if err != nil {
			return fmt.Errorf("gpu: timestamp queries: %w", err)
		}
		b.timer = &devTimer{pool: pool}
	}
	b.timer.sink = sink
	return nil
}

// closeTimer turns timing off and frees its query pool.
func (b *Backend) closeTimer() {
	if b.timer != nil {
		b.timer.pool.Destroy()
		b.timer = nil
	}
}

// MarkDevice implements model.DeviceTimer.
func (b *Backend) MarkDevice(name string, begin bool) {
	t := b.timer
	if t == nil || b.err != nil {
		return
	}
	if !begin && len(t.open) == 0 {
		return
	}
	if t.used+2 > tsQueries { // keep one for the submission's end
		if err := b.flush(); err != nil {
			b.fail(err)
			return
		}
	}
	if err := b.record(); err != nil {
		b.fail(err)
		return
	}
	q := t.used
	b.cb.Timestamp(t.pool, q)
	t.used++
	if begin {
		t.open = append(t.open, openSpan{name: name, q: int(q)})
		return
	}
	o := t.open[len(t.open)-1]
	t.open = t.open[:len(t.open)-1]
	t.closed = append(t.closed, closedSpan{name: o.name, q0: o.q, q1: q, start0: o.start})
}

// timerBegin starts a submission's queries (record calls it after Begin).
func (b *Backend) timerBegin() {
	t := b.timer
	if t == nil {
		return
	}
	b.cb.ResetQueries(t.pool, 0, tsQueries)
	b.cb.Timestamp(t.pool, 0)
	t.used = 1
}

// timerEnd writes the submission's last timestamp (flush calls it before
// End).
func (b *Backend) timerEnd() {
	if t := b.timer; t != nil && t.used > 0 {
		b.cb.Timestamp(t.pool, t.used)
		t.used++
	}
}

// timerDone resolves the submission's queries once its fence signalled:
// waited is when the host began waiting, done when the wait returned.
func (b *Backend) timerDone(waited, done time.Time) error {
	t := b.timer
	if t == nil || t.used == 0 {
		return nil
	}
	n := t.used
	t.used = 0
	ticks, err := t.pool.Ticks(0, n)
	if err != nil {
		return fmt.Errorf("gpu: reading timestamps: %w", err)
	}
	bits := b.dev.TimestampBits(vk.Compute)
	mask := ^uint64(0)
	if bits < 64 {
		mask = 1<<bits - 1
	}
	period := float64(b.dev.Info().TimestampPeriod)
	last := ticks[n-1]
	host := func(q int) time.Time {
		return done.Add(-time.Duration(float64((last-ticks[q])&mask) * period))
	}
	for _, c := range t.closed {
		start := c.start0
		if c.q0 >= 0 {
			start = host(c.q0)
		}
		t.sink(model.DeviceSpan{Name: c.name, Start: start, End: host(int(c.q1)), Bytes: c.bytes})
	}
	t.closed = t.closed[:0]
	for i := range t.open {
		if o := &t.open[i]; o.q >= 0 {
			o.start, o.q = host(o.q), -1
		}
	}
	t.sink(model.DeviceSpan{Name: "gpu-wait", Start: waited, End: done, Wait: true})
	return nil
}

// timerUpload writes the timestamp starting an expert upload into the
// transfer command buffer and returns its query, or -1 when timing is off
// or transfers have a queue of their own (not timed).
func (b *Backend) timerUpload() int {
	t := b.timer
	if t == nil || b.dev.SeparateTransfer() || t.used+5 > tsQueries {
		return -1
	}
	q := t.used
	b.up.cb.Timestamp(t.pool, q)
	t.used++
	return int(q)
}

// timerUploadEnd writes the timestamp ending the upload begun at query q0.
func (b *Backend) timerUploadEnd(q0 int) int {
	t := b.timer
	if t == nil || q0 < 0 || t.used+4 > tsQueries {
		return -1
	}
	q := t.used
	b.up.cb.Timestamp(t.pool, q)
	t.used++
	return int(q)
}

// timerStamp writes a timestamp into the compute command buffer and
// returns its query, or -1.
func (b *Backend) timerStamp() int {
	t := b.timer
	if t == nil || t.used+2 > tsQueries {
		return -1
	}
	q := t.used
	b.cb.Timestamp(t.pool, q)
	t.used++
	return int(q)
}

// timerUploadSpans records layer's upload of bytes as a span between
// queries q0 and q1, and the time compute waited for it: from the end of
// the hits' products (qa) to the end of the upload (q1), when the misses'
// products could start (a span ending before it starts is dropped by the
// recorder: no wait). A query of -1 leaves its span out.
func (b *Backend) timerUploadSpans(layer int, bytes int64, q0, q1, qa int) {
	t := b.timer
	if t == nil {
		return
	}
	if q0 >= 0 && q1 >= 0 {
		t.closed = append(t.closed, closedSpan{name: fmt.Sprintf("gpu:upload-%d", layer), q0: q0, q1: uint32(q1), bytes: bytes})
	}
	if qa >= 0 && q1 >= 0 {
		t.closed = append(t.closed, closedSpan{name: fmt.Sprintf("gpu:upload-wait-%d", layer), q0: qa, q1: uint32(q1)})
	}
}
