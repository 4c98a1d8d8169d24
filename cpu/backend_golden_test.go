package cpu_test

import (
	"fmt"
	"testing"

	"github.com/flowinfer/flowinfer/cpu"
	"github.com/flowinfer/flowinfer/internal/golden"
)

// TestBackendGolden runs P1 and P2 of every golden model through the
// Backend (2 threads) as TestGoldenLogits runs them through Ref: the prompt
// as one batch, then teacher forcing of llama.cpp's greedy tokens, checked
// against llama.cpp's logits with the same bounds (nativeBounds).
func TestBackendGolden(t *testing.T) {
	dir, man := golden.Load(t)
	for i := range man.Cases {
		c := &man.Cases[i]
		if c.PromptID == "P3" {
			continue
		}
		t.Run(c.ID, func(t *testing.T) {
			m := openModel(t, c.Model)
			n := len(c.PromptTokens)
			ctx, err := m.NewContext(newBackend(t, 2), n+len(c.GenTokens), 1, n)
			if err != nil {
				t.Fatal(err)
			}
			V := c.NVocab
			rows := decodeAll(t, ctx, c.PromptTokens, c.GenTokens[:len(c.GenTokens)-1])
			var prompt, gen golden.Stats
			want := readRows(t, dir, c.PromptLogits)
			for row := 0; row < c.NRows; row++ {
				prompt.AddRow(rows[c.FirstRow+row], want[row*V:(row+1)*V])
			}
			// gen row i comes from feeding llama.cpp's token i-1; row 0
			// is the last prompt row.
			wantGen := readRows(t, dir, c.GenLogits)
			for i := range c.GenTokens {
				gen.AddRow(rows[n-1+i], wantGen[i*V:(i+1)*V])
			}
			t.Log(fmt.Sprintf("%-22s %s prompt max|Δ| %.2e RMS %.2e; steps max|Δ| %.2e RMS %.2e", stem(c.Model), c.PromptID,
				prompt.MaxAbs, prompt.RMS(), gen.MaxAbs, gen.RMS()))
			b := nativeBounds(c)
			b.check(t, "prompt", &prompt)
			b.check(t, "steps", &gen)
		})
	}
}

var _ = cpu.NewBackend
