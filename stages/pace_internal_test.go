package stages

import (
	"testing"
	"time"
)

// TestPacer: with nothing decoding, or before a decode step is measured, a
// chunk fills the batch; a paced chunk starts at MinChunk and is then as
// many tokens as the target step (factor × decode step) leaves room for at
// the measured cost per prompt token, at most doubling or halving per
// step, never below MinChunk; when one token costs more than that, steps
// between paced ones decode alone so that steps average the target; a
// negative factor turns pacing off.
func TestPacer(t *testing.T) {
	p := pacer{factor: 2}
	if n := p.budget(1, 500); n != 500 {
		t.Errorf("nothing measured: budget %d, want the batch", n)
	}
	p.nDecode, p.nPrompt = 1, 0
	p.observe(10 * time.Millisecond)
	if n := p.budget(0, 500); n != 500 {
		t.Errorf("nothing decoding: budget %d, want the batch", n)
	}
	if n := p.budget(1, 500); n != MinChunk {
		t.Errorf("first paced chunk %d, want %d", n, MinChunk)
	}
	step := func(nPrompt int, d time.Duration) int { // the next chunk's size
		p.nDecode, p.nPrompt = 1, nPrompt
		p.observe(d)
		return max(p.chunk, MinChunk)
	}
	// fast steps: the chunk doubles, however fast (a noisy step cannot
	// blow it up to the whole batch)
	if n := step(8, time.Millisecond); n != 16 {
		t.Errorf("after a fast step: %d, want 16", n)
	}
	if n := step(16, 0); n != 32 {
		t.Errorf("after a step measured 0: %d, want 32", n)
	}
	// at the target (2 × 10 ms) it holds
	if n := step(32, 20*time.Millisecond); n != 32 {
		t.Errorf("at the target: %d, want 32", n)
	}
	// slower than the target: 32 prompt tokens took 15 ms, so 10 ms
	// holds 21; it shrinks by half at most, to MinChunk
	if n := step(32, 25*time.Millisecond); n != 21 {
		t.Errorf("25 ms step: %d, want 21", n)
	}
	if n := step(21, time.Second); n != 10 {
		t.Errorf("slow step: %d, want 10", n)
	}
	// one prompt token costing a tenth of a decode step: room for ten,
	// but it at most doubles
	for range 3 {
		step(max(p.chunk, MinChunk), time.Second)
	}
	if n := step(1, 11*time.Millisecond); n != 2 {
		t.Errorf("from one cheap token: %d, want 2", n)
	}
	for range 5 {
		step(max(p.chunk, MinChunk), time.Second)
	}
	if n := max(p.chunk, MinChunk); n != MinChunk {
		t.Errorf("slow steps: %d, want %d", n, MinChunk)
	}
	p.chunk, p.credit = 64, 0
	if n := p.budget(1, 5); n != 5 {
		t.Errorf("budget %d above the free batch 5", n)
	}
	// deep in a prompt one token costs 30 ms, three decode steps: a step
	// earns 10 ms, so after a paced step the next two decode alone, and
	// steps average factor × decode step
	d := pacer{factor: 2}
	d.nDecode, d.nPrompt = 1, 0
	d.observe(10 * time.Millisecond)
	var total time.Duration
	paced := 0
	for range 30 {
		n := d.budget(1, 500)
		step := 10 * time.Millisecond
		if n > 0 {
			paced++
			step += time.Duration(n) * 30 * time.Millisecond
		}
		d.nDecode, d.nPrompt = 1, n
		d.observe(step)
		total += step
	}
	// (the first decode-only step banked one step's earning: 11 paced,
	// 21 ms on average over 30 steps)
	if avg := total / 30; paced < 10 || paced > 11 || avg > 21*time.Millisecond {
		t.Errorf("one-token chunks at 3 decode steps each: %d of 30 steps paced, average step %v; want 10-11 and 20-21 ms", paced, avg)
	}
	// a paced step that overspent: the next decodes alone
	if n := d.budget(1, 500); d.credit < 0 && n != 0 {
		t.Errorf("credit %.3f s: budget %d, want 0", d.credit, n)
	}
	off := pacer{factor: -1, decodeStep: 0.01, chunk: 8}
	if n := off.budget(3, 500); n != 500 {
		t.Errorf("pacing off: budget %d", n)
	}
}
