package stages

import (
	"fmt"
	"math"
)

// Pooling is how an embedding request turns the final hidden states of its
// tokens into one vector. The values are llama.cpp's llama_pooling_type,
// as stored in GGUF's "<arch>.pooling_type".
type Pooling int

const (
	PoolNone Pooling = 0 // not an embedding request
	PoolMean Pooling = 1 // average over the tokens
	PoolCLS  Pooling = 2 // the first token's
	PoolLast Pooling = 3 // the last token's
)

func (p Pooling) String() string {
	switch p {
	case PoolNone:
		return "none"
	case PoolMean:
		return "mean"
	case PoolCLS:
		return "cls"
	case PoolLast:
		return "last"
	}
	return fmt.Sprintf("pooling(%d)", int(p))
}

// ParsePooling reads a --pooling value: mean, cls or last.
func ParsePooling(s string) (Pooling, error) {
	switch s {
	case "mean":
		return PoolMean, nil
	case "cls":
		return PoolCLS, nil
	case "last":
		return PoolLast, nil
	}
	return PoolNone, fmt.Errorf("pooling %q is not one of mean, cls, last", s)
}

// needs reports whether position i of an n-token input contributes to the
// pooled vector.
func (p Pooling) needs(i, n int) bool {
	switch p {
	case PoolMean:
		return true
	case PoolCLS:
		return i == 0
	case PoolLast:
		return i == n-1
	}
	return false
}

// pooler accumulates an embedding request's pooled vector, row by row
// (each row delivered once, in position order), in float64.
type pooler struct {
	sum  []float64
	rows int
}

func (pl *pooler) add(row []float32) {
	if pl.sum == nil {
		pl.sum = make([]float64, len(row))
	}
	for i, v := range row {
		pl.sum[i] += float64(v)
	}
	pl.rows++
}

// vector returns the mean of the rows added, L2-normalised (llama-server's
// default embd_normalize 2); a zero vector stays zero.
func (pl *pooler) vector() []float32 {
	out := make([]float32, len(pl.sum))
	if pl.rows == 0 {
		return out
	}
	var norm float64
	for _, v := range pl.sum {
		m := v / float64(pl.rows)
		norm += m * m
	}
	scale := 0.0
	if norm > 0 {
		scale = 1 / (math.Sqrt(norm) * float64(pl.rows))
	}
	for i, v := range pl.sum {
		out[i] = float32(v * scale)
	}
	return out
}
