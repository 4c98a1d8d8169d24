package model

// qwen2: llama's block with biases on the Q, K and V projections and NEOX
// RoPE (rotating the two halves of each head); embeddings usually tied.

func loadQwen2(l *loader, m *Model) {
	m.RopeType = RopeNeox
	loadCommon(l, m)
	m.Rope.Type = RopeNeox
	for i := range m.Layers {
		loadAttention(l, m, i)
		L := &m.Layers[i]
		L.Bq = l.vector(blk(i, "attn_q.bias"), m.QDim(), true)
		L.Bk = l.vector(blk(i, "attn_k.bias"), m.KDim(), true)
		L.Bv = l.vector(blk(i, "attn_v.bias"), m.VDim(), true)
		loadFFN(l, m, i)
	}
	m.forward = forwardDense
}
