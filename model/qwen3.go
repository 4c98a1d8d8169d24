package model

// qwen3: no attention biases; instead Q and K are RMS-normalised per head
// (attn_q_norm, attn_k_norm over HeadDimK) before NEOX RoPE. The head
// dimension comes from attention.key_length and may differ from
// NEmbd/NHead (Q projects NEmbd -> NHead*HeadDimK).

func loadQwen3(l *loader, m *Model) {
	m.RopeType = RopeNeox
	loadCommon(l, m)
	m.Rope.Type = RopeNeox
	for i := range m.Layers {
		loadAttention(l, m, i)
		loadQKNorm(l, m, i)
		loadFFN(l, m, i)
	}
	m.forward = forwardDense
}

func loadQKNorm(l *loader, m *Model, i int) {
	L := &m.Layers[i]
	L.QNorm = l.vector(blk(i, "attn_q_norm.weight"), m.HeadDimK, true)
	L.KNorm = l.vector(blk(i, "attn_k_norm.weight"), m.HeadDimK, true)
}
