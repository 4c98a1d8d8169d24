package model_test

import (
	"testing"

	"github.com/flowinfer/flowinfer/model"
)

// promptLogits decodes ids as one batch of sequence 0 from position 0 and
// returns the last position's logits (the goldens' "logits at the end of
// the prompt").
func promptLogits(t *testing.T, mctx *model.Context, ids []int32) []float32 {
	t.Helper()
	batch := &model.Batch{Tokens: ids, Pos: make([]int32, len(ids)), Seq: make([]int32, len(ids)), Logits: make([]bool, len(ids))}
	for i := range ids {
		batch.Pos[i] = int32(i)
	}
	batch.Logits[len(ids)-1] = true
	logits, err := mctx.Decode(batch)
	if err != nil {
		t.Fatal(err)
	}
	return logits
}
