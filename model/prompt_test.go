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

// chunkLogits decodes ids into sequence 0 from position 0 in batches of
// the sizes chunks gives (summing to len(ids)) and returns every batch's
// logits (its last row's) one after another.
func chunkLogits(t *testing.T, mctx *model.Context, ids []int32, chunks []int) []float32 {
	t.Helper()
	var all []float32
	at := 0
	for _, k := range chunks {
		b := &model.Batch{Tokens: ids[at : at+k], Pos: make([]int32, k), Seq: make([]int32, k)}
		for i := range k {
			b.Pos[i] = int32(at + i)
		}
		lg, err := mctx.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, lg...)
		at += k
	}
	if at != len(ids) {
		t.Fatalf("chunks %v cover %d of %d tokens", chunks, at, len(ids))
	}
	return all
}
