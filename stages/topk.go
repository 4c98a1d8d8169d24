package stages

// logitsTopK returns the Batch.TopK of a step: the largest number of top
// logits a sampled row needs (sample.Sampler.TopNeed), or 0 when a row
// needs the whole distribution: its sampler does, it asks for logprobs,
// or its caller reads logits rows (OnLogits). A backend that ranks logits
// on the device then reads back k pairs per row instead of the vocabulary.
func logitsTopK(st *step) int {
	k := 0
	for r, q := range st.rowSeq {
		if !st.rowSample[r] || q.sampler == nil || q.req.OnLogits != nil || q.req.Logprobs {
			return 0
		}
		n := q.sampler.TopNeed()
		if n == 0 {
			return 0
		}
		k = max(k, n)
	}
	return k
}
