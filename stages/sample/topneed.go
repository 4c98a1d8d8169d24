package sample

// TopNeed returns how many of a row's largest logits (larger first, lower
// id among equals) decide the token Sample picks: Sample on a row that
// holds only those at their ids and -Inf elsewhere picks the token it
// picks on the whole row, so a backend that ranks logits on the device
// may read back only those (model.Batch.TopK). 0 means the whole row is
// needed: sampling without top-k (top-p and min-p over every token), a
// grammar, a positive logit bias, or penalties that can raise a logit
// (repeat penalty below 1, negative presence or frequency penalty).
//
// Why k + t suffices, where k is 1 (greedy) or TopK and t bounds the
// tokens whose logits bias and penalties change (the bias entries and
// the penalty window): those changes only lower logits, so an unchanged
// token among the best k after them had fewer than k tokens ranked before
// it on the raw row, and a changed one fewer than k unchanged plus t-1
// changed ones. Everything after the top k is computed from the top k
// itself (top-p and min-p renormalize over it), so the draw is the same.
func (s *Sampler) TopNeed() int {
	if s.gm != nil {
		return 0
	}
	t := len(s.bias)
	for _, b := range s.bias {
		if b.logit > 0 {
			return 0
		}
	}
	if s.penalty {
		if s.p.RepeatPenalty < 1 || s.p.PresencePenalty < 0 || s.p.FrequencyPenalty < 0 {
			return 0
		}
		t += len(s.ring) // the window's distinct tokens, at most
	}
	k := 1
	if !s.greedy {
		if s.p.TopK <= 0 {
			return 0
		}
		k = s.p.TopK
	}
	return min(k+t, s.nVocab)
}
