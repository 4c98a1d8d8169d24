package model

import "fmt"

// llama: pre-norm decoder blocks with grouped-query attention, RoPE on
// adjacent pairs (llama3 frequency factors from rope_freqs.weight when the
// file has them), a SwiGLU FFN, and an output head that may be tied to the
// token embeddings.

func loadLlama(l *loader, m *Model) {
	m.RopeType = RopeNorm
	loadCommon(l, m)
	m.Rope.Type = RopeNorm
	if f := l.vector("rope_freqs.weight", m.RopeDim/2, false); f != nil {
		m.Rope.Factors = f
	}
	for i := range m.Layers {
		loadAttention(l, m, i)
		loadFFN(l, m, i)
	}
	m.forward = forwardDense
}

// forwardDense is the forward pass of the dense families (llama, qwen2,
// qwen3); their differences (biases, QK-norm, RoPE kind) are in the weights
// and hyperparameters, handled inside attention.
func forwardDense(c *Context, b *Batch) error {
	c.embed(b)
	return c.layers(b, func(il int, b *Batch) error {
		if err := c.attention(il, b); err != nil { // x += attn(norm(x))
			return err
		}
		c.ffn(il, b) // x += ffn(norm(x))
		return nil
	})
}

func blk(i int, name string) string { return fmt.Sprintf("blk.%d.%s", i, name) }
