package model

import (
	"fmt"
	"strings"

	"github.com/flowinfer/flowinfer/quant"
)

// KVType is the element type of the K or V half of a KV cache, with
// llama.cpp's -ctk/-ctv names (f32, f16, bf16, q8_0, q4_0) plus the
// TurboQuant types tq4 and tq3 (quant.Turbo: per head, a seeded rotation,
// 4 or 3 bits per rotated coordinate and a float16 scale).
type KVType uint8

const (
	KVF32 KVType = iota
	KVF16
	KVBF16
	KVQ8_0
	KVQ4_0
	KVTQ4
	KVTQ3
	nKVTypes
)

var kvTypeNames = [nKVTypes]string{"f32", "f16", "bf16", "q8_0", "q4_0", "tq4", "tq3"}

// KVTypeNames lists the supported names, for help texts and errors.
func KVTypeNames() string { return strings.Join(kvTypeNames[:], ", ") }

func (t KVType) String() string {
	if t < nKVTypes {
		return kvTypeNames[t]
	}
	return fmt.Sprintf("KVType(%d)", uint8(t))
}

// ParseKVType returns the type named s (llama.cpp's spelling, any case).
func ParseKVType(s string) (KVType, error) {
	for i, n := range kvTypeNames {
		if strings.EqualFold(s, n) {
			return KVType(i), nil
		}
	}
	return 0, fmt.Errorf("KV cache type %q is not supported (supported: %s)", s, KVTypeNames())
}

// Quant returns the ggml type of a block or float KV type (false for the
// TurboQuant types, which are not ggml types).
func (t KVType) Quant() (quant.Type, bool) {
	switch t {
	case KVF32:
		return quant.F32, true
	case KVF16:
		return quant.F16, true
	case KVBF16:
		return quant.BF16, true
	case KVQ8_0:
		return quant.Q8_0, true
	case KVQ4_0:
		return quant.Q4_0, true
	}
	return 0, false
}

// Turbo reports the bits per coordinate of a TurboQuant type (0 if t is not
// one).
func (t KVType) Turbo() int {
	switch t {
	case KVTQ4:
		return 4
	case KVTQ3:
		return 3
	}
	return 0
}

// HeadBytes returns the bytes one head of headDim values takes in type t,
// or an error if t cannot store heads of that size (block types need a
// whole number of blocks per head, as in llama.cpp).
func (t KVType) HeadBytes(headDim int) (int, error) {
	if b := t.Turbo(); b > 0 {
		tq, err := quant.NewTurbo(headDim, b, 0)
		if err != nil {
			return 0, err
		}
		return tq.RowBytes(), nil
	}
	qt, ok := t.Quant()
	if !ok {
		return 0, fmt.Errorf("KV cache type %s is not supported (supported: %s)", t, KVTypeNames())
	}
	if bs := qt.BlockSize(); headDim%bs != 0 {
		return 0, fmt.Errorf("KV cache type %s stores heads in blocks of %d values; this model's heads have %d", t, bs, headDim)
	}
	return quant.RowBytes(qt, headDim)
}

// KVTypes are the types of a cache's K and V halves. The zero value is
// f32 for both.
type KVTypes struct {
	K, V KVType
	// Protect keeps the first and the last Protect layers' K and V in f16
	// where K or V is a quantized type (q8_0, q4_0, tq4, tq3): the layers
	// most sensitive to KV error.
	Protect int
	// Recent (--kv-recent) keeps, in layers whose K or V type is
	// quantized, that half's rows also in f16 (the recent rows) for the
	// positions each query reads from them: at least the Recent most
	// recent ones (KVCache.RecentFrom). 0: none.
	Recent int
	// SWAFull (--swa-full) keeps a row per cell in the sliding-window
	// layers too, instead of a ring of their window (kvswa.go): a cached
	// prefix is then reused from blocks alone, at full-attention memory.
	SWAFull bool
}

func (t KVTypes) String() string {
	s := t.K.String() + "/" + t.V.String()
	if t.Protect > 0 {
		s += fmt.Sprintf(" (f16 in the first and last %d layers)", t.Protect)
	}
	if t.Recent > 0 {
		s += fmt.Sprintf(" (the last %d positions in f16)", t.Recent)
	}
	if t.SWAFull {
		s += " (full-size sliding-window layers)"
	}
	return s
}

// quantized reports whether t is a block or TurboQuant type.
func (t KVType) quantized() bool { return t != KVF32 && t != KVF16 && t != KVBF16 }

// ForLayer returns the K and V types of layer l of n.
func (t KVTypes) ForLayer(l, n int) (k, v KVType) {
	k, v = t.K, t.V
	if l < t.Protect || l >= n-t.Protect {
		if k.quantized() {
			k = KVF16
		}
		if v.quantized() {
			v = KVF16
		}
	}
	return k, v
}

// KVLayer is one layer's K and V types and bytes per head.
//
// RotK and RotV are llama.cpp's attention rotation (llama-kv-cache.cpp,
// attn_rot_k/attn_rot_v, on unless LLAMA_ATTN_ROT_DISABLE): where K is
// stored as q8_0 or q4_0 and the head has a multiple of 64 values, the
// queries and keys are multiplied, after RoPE, by the orthonormal
// Walsh-Hadamard matrix in pieces of RotK values (the largest power of two
// dividing the head, at least 64), which leaves every score unchanged but
// spreads outlier channels over the block before it is quantized; where V
// is q8_0 or q4_0 (heads a multiple of 64), the values are rotated in
// pieces of RotV = 64 before storing and the attention's output rotated
// back. 0: no rotation (float types, TurboQuant, which rotates by itself,
// and --kv-protect's f16 layers).
//
// RecentK and RecentV report whether the layer keeps f16 copies of its
// recent K or V rows (KVTypes.Recent, for a quantized half).
//
// Recurrent marks a hybrid model's recurrent layer (Hyper.IsRecurrent),
// which attends to no cache: it has no K/V rows (KHead and VHead are 0, so
// every byte count skips it; its per-sequence state is KVCache.State), as
// llama.cpp's llama_memory_hybrid gives its KV cache only the layers that
// are not recurrent.
type KVLayer struct {
	K, V             KVType
	KHead, VHead     int
	KUnit            int // the unit K heads are transposed in (quant.TileUnit)
	RotK, RotV       int
	RecentK, RecentV bool
	Recurrent        bool
	NoRows           bool // no K/V storage: a recurrent layer or one with !Hyper.KeepsKV
	// NHead, HeadK and HeadV are the layer's KV heads and values per K
	// and V head (Hyper.NHeadKVAt, HeadDimKAt, HeadDimVAt; gemma4's
	// sliding and global layers differ).
	NHead, HeadK, HeadV int
}

// RowBytes is the bytes one token's K and V take in the layer (0 for a
// layer without rows).
func (lt KVLayer) RowBytes() int { return (lt.KHead + lt.VHead) * lt.NHead }

// blockRotated reports whether llama.cpp rotates rows of type t (the
// ggml block types) for a head of dim values.
func blockRotated(t KVType, dim int) bool {
	return (t == KVQ8_0 || t == KVQ4_0) && dim%64 == 0
}

// KVLayers returns every layer's types and head sizes, or an error if a
// type cannot store the model's heads.
func KVLayers(h *Hyper, t KVTypes) ([]KVLayer, error) {
	if t.Protect < 0 {
		return nil, fmt.Errorf("KV cache: %d protected layers", t.Protect)
	}
	if t.Recent < 0 {
		return nil, fmt.Errorf("KV cache: %d recent positions", t.Recent)
	}
	ls := make([]KVLayer, h.NLayer)
	for l := range ls {
		k, v := t.ForLayer(l, h.NLayer)
		dk, dv, nh := h.HeadDimKAt(l), h.HeadDimVAt(l), h.NHeadKVAt(l)
		hk, err := k.HeadBytes(dk)
		if err != nil {
			return nil, fmt.Errorf("-ctk: %w", err)
		}
		hv, err := v.HeadBytes(dv)
		if err != nil {
			return nil, fmt.Errorf("-ctv: %w", err)
		}
		if h.IsRecurrent(l) {
			ls[l] = KVLayer{K: k, V: v, KUnit: 1, Recurrent: true, NoRows: true}
			continue
		}
		ls[l] = KVLayer{K: k, V: v, KHead: hk, VHead: hv, KUnit: 1, RecentK: t.Recent > 0 && k.quantized(), RecentV: t.Recent > 0 && v.quantized(),
			NHead: nh, HeadK: dk, HeadV: dv}
		if qt, _ := k.Quant(); k.Turbo() == 0 {
			ls[l].KUnit = quant.TileUnit(qt)
		}
		if blockRotated(k, dk) {
			n := 64
			for dk%(2*n) == 0 {
				n *= 2
			}
			ls[l].RotK = n
		}
		if blockRotated(v, dv) {
			ls[l].RotV = 64
		}
		if !h.KeepsKV(l) {
			// a layer reading another's K and V (gemma4's shared KV
			// layers) or attending to nothing (nemotron_h's FFN-only
			// layers) keeps none: no rows, no bytes
			ls[l] = KVLayer{K: k, V: v, KUnit: 1, NoRows: true}
		}
	}
	return ls, nil
}

// RecentRows returns how many of positions 0..pos a decode query at pos
// reads as --kv-recent's f16 copies (those from KVCache.RecentFrom(pos)
// on) in the halves that keep them: 0 without --kv-recent.
func (t KVTypes) RecentRows(pos int) int {
	if t.Recent <= 0 {
		return 0
	}
	return pos + 1 - recentFrom(pos, t.Recent)
}

// KVRecentBytes returns the bytes a decode query at position pos reads
// beyond KVBytesPerToken·(pos+1) in a cache of types t: its rows from
// KVCache.RecentFrom(pos) on are read as f16 copies (--kv-recent) in the
// halves that keep them, instead of the quantized rows.
func KVRecentBytes(h *Hyper, t KVTypes, pos int) (int64, error) {
	ls, err := KVLayers(h, t)
	if err != nil || t.Recent == 0 {
		return 0, err
	}
	n := int64(t.RecentRows(pos))
	var d int64
	for _, l := range ls {
		if l.RecentK {
			d += int64(2*l.HeadK-l.KHead) * int64(l.NHead)
		}
		if l.RecentV {
			d += int64(2*l.HeadV-l.VHead) * int64(l.NHead)
		}
	}
	return n * d, nil
}

// KVBytesPerToken returns the bytes one token's K and V take over all
// layers that keep rows (not a hybrid model's recurrent layers) in a cache
// of types t (for sizing caches and admission).
func KVBytesPerToken(h *Hyper, t KVTypes) (int, error) {
	ls, err := KVLayers(h, t)
	n := 0
	for _, l := range ls {
		n += l.RowBytes()
	}
	return n, err
}
