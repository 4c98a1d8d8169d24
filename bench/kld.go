package bench

// KL divergence of a run against a saved base, as llama-perplexity
// --kl-divergence computes and prints it: per scored position the KL
// divergence of this run's token distribution from the base's, the change in
// the probability of the actual next token (Δp), whether both put the same
// token on top, and the perplexity of both. It does not compute the
// hellaswag, winogrande or multiple-choice scores.

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"slices"
)

// KLDStats are the running sums llama-perplexity keeps
// (kl_divergence_result). Add merges two.
type KLDStats struct {
	SumNLL, SumNLL2         float64 // this run's negative log-likelihoods
	SumNLLBase, SumNLLBase2 float64 // the base's
	SumNLLNLLBase           float64 // Σ nll·nll_base
	SumKLD, SumKLD2         float64
	SumPDiff, SumPDiff2     float64 // Δp = p - p_base of the actual token
	SumPDiff4               float64
	MaxPDiff                float32 // max |Δp|
	NSameTop                int     // positions where both put the same token on top
	Count                   int
}

// Add adds o's sums to s.
func (s *KLDStats) Add(o *KLDStats) {
	s.SumNLL += o.SumNLL
	s.SumNLL2 += o.SumNLL2
	s.SumNLLBase += o.SumNLLBase
	s.SumNLLBase2 += o.SumNLLBase2
	s.SumNLLNLLBase += o.SumNLLNLLBase
	s.SumKLD += o.SumKLD
	s.SumKLD2 += o.SumKLD2
	s.SumPDiff += o.SumPDiff
	s.SumPDiff2 += o.SumPDiff2
	s.SumPDiff4 += o.SumPDiff4
	s.MaxPDiff = max(s.MaxPDiff, o.MaxPDiff)
	s.NSameTop += o.NSameTop
	s.Count += o.Count
}

// scoreRow adds one position to s: logits are this run's, base the stored
// row (2·rowWords bytes), tok the actual next token. It returns the
// position's KL divergence and Δp. The arithmetic mirrors llama.cpp's
// log_softmax(..., kl_divergence_result&) operation for operation, float32
// where it is float.
func (s *KLDStats) scoreRow(logits []float32, base []byte, tok int32) (float64, float32) {
	mx, imax := logits[0], 0
	for i, v := range logits[1:] {
		if v > mx {
			mx, imax = v, i+1
		}
	}
	var sumExp float64
	for _, v := range logits {
		sumExp += float64(expf(v - mx))
	}
	lse := float32(math.Log(sumExp))
	scale := math.Float32frombits(binary.LittleEndian.Uint32(base[0:]))
	minLogProb := math.Float32frombits(binary.LittleEndian.Uint32(base[4:]))
	q := base[8:]
	qAt := func(i int) float32 { return float32(binary.LittleEndian.Uint16(q[2*i:])) }

	nll := mx + lse - logits[tok]
	s.SumNLL += float64(nll)
	s.SumNLL2 += float64(nll * nll)
	nllBase := -(scale*qAt(int(tok)) + minLogProb)
	s.SumNLLBase += float64(nllBase)
	s.SumNLLBase2 += float64(nllBase * nllBase)
	s.SumNLLNLLBase += float64(nll * nllBase)

	mx += lse // log p[i] = logits[i] - mx
	var kld float64
	imaxBase := -1
	var pMaxBase float32
	for i, v := range logits {
		pLogBase := scale*qAt(i) + minLogProb
		if i == 0 || pLogBase > pMaxBase {
			pMaxBase, imaxBase = pLogBase, i
		}
		if pLogBase > -16 {
			kld += float64(expf(pLogBase) * (pLogBase - v + mx))
		}
	}
	s.SumKLD += kld
	s.SumKLD2 += kld * kld
	s.Count++
	if imax == imaxBase {
		s.NSameTop++
	}
	pDiff := expf(-nll) - expf(-nllBase)
	s.SumPDiff += float64(pDiff)
	p2 := float64(pDiff * pDiff)
	s.SumPDiff2 += p2
	s.SumPDiff4 += p2 * p2
	s.MaxPDiff = max(s.MaxPDiff, float32(math.Abs(float64(pDiff))))
	return kld, pDiff
}

// meanAndUncertainty is llama-perplexity's: the mean of count values from
// their sum and sum of squares, and the standard error of that mean (0 for
// 10 values or fewer).
func meanAndUncertainty(sum, sum2 float64, count int) (float64, float64) {
	if count < 1 {
		return 0, 0
	}
	f := sum / float64(count)
	df := sum2/float64(count) - f*f
	if df > 0 && count > 10 {
		return f, math.Sqrt(df / float64(count-1))
	}
	return f, 0
}

// covariance is llama-perplexity's covariance of the means of a and b.
func covariance(sumA, sumB, sumAB float64, count int) float64 {
	if count < 10 {
		return 0
	}
	n := float64(count)
	return (sumAB/n - (sumA/n)*(sumB/n)) / (n - 1)
}

// KLDSummary holds the figures llama-perplexity derives from the sums, each
// with its uncertainty.
type KLDSummary struct {
	PPL, PPLUnc           float64 // PPL(Q), this run
	PPLBase, PPLBaseUnc   float64
	LogPPLCor             float64 // correlation of ln PPL(Q) and ln PPL(base)
	LogRatio, LogRatioUnc float64 // ln(PPL(Q)/PPL(base))
	Ratio, RatioUnc       float64 // PPL(Q)/PPL(base)
	Diff, DiffUnc         float64 // PPL(Q)-PPL(base)
	KLD, KLDUnc           float64
	PDiff, PDiffUnc       float64 // mean Δp
	PDiffRMS, PDiffRMSUnc float64
	SameTop, SameTopUnc   float64 // fraction of positions with the same top token
}

// Summary derives the figures from the sums, with llama-perplexity's
// formulas.
func (s *KLDStats) Summary() KLDSummary {
	var m KLDSummary
	logPPL, logPPLUnc := meanAndUncertainty(s.SumNLL, s.SumNLL2, s.Count)
	m.PPL = math.Exp(logPPL)
	m.PPLUnc = m.PPL * logPPLUnc
	logBase, logBaseUnc := meanAndUncertainty(s.SumNLLBase, s.SumNLLBase2, s.Count)
	m.PPLBase = math.Exp(logBase)
	m.PPLBaseUnc = m.PPLBase * logBaseUnc
	cov := covariance(s.SumNLL, s.SumNLLBase, s.SumNLLNLLBase, s.Count)
	m.LogPPLCor = cov / (logPPLUnc * logBaseUnc)
	m.LogRatio = logPPL - logBase
	m.LogRatioUnc = math.Sqrt(logPPLUnc*logPPLUnc + logBaseUnc*logBaseUnc - 2*cov)
	m.Ratio = math.Exp(m.LogRatio)
	m.RatioUnc = m.Ratio * m.LogRatioUnc
	pplCov := m.PPL * m.PPLBase * cov
	m.Diff = m.PPL - m.PPLBase
	m.DiffUnc = math.Sqrt(m.PPLUnc*m.PPLUnc + m.PPLBaseUnc*m.PPLBaseUnc - 2*pplCov)
	m.KLD, m.KLDUnc = meanAndUncertainty(s.SumKLD, s.SumKLD2, s.Count)
	m.PDiff, m.PDiffUnc = meanAndUncertainty(s.SumPDiff, s.SumPDiff2, s.Count)
	mse, mseUnc := meanAndUncertainty(s.SumPDiff2, s.SumPDiff4, s.Count)
	m.PDiffRMS = math.Sqrt(mse)
	m.PDiffRMSUnc = 0.5 / m.PDiffRMS * mseUnc
	if s.Count > 0 {
		m.SameTop = float64(s.NSameTop) / float64(s.Count)
	}
	if s.Count > 1 {
		m.SameTopUnc = math.Sqrt(m.SameTop * (1 - m.SameTop) / float64(s.Count-1))
	}
	return m
}

// KLDHeading is the heading of the per-chunk lines (after the first chunk,
// llama-perplexity prints an empty line and this).
const KLDHeading = "chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              Δp RMS            Same top p\n"

// ChunkLine formats the line llama-perplexity prints after chunk c
// (1-based) from the sums so far.
func (s *KLDStats) ChunkLine(c int) string {
	m := s.Summary()
	return fmt.Sprintf("%4d    %9.4f ± %9.4f    %10.5f ± %10.5f    %10.5f ± %10.5f    %6.3f ± %6.3f %%    %6.3f ± %6.3f %%\n",
		c, m.PPL, m.PPLUnc, m.LogRatio, m.LogRatioUnc, m.KLD, m.KLDUnc, 100*m.PDiffRMS, 100*m.PDiffRMSUnc, 100*m.SameTop, 100*m.SameTopUnc)
}

// percentile is llama-perplexity's, in float32, of sorted values.
func percentile(values []float32, fraction float32) float32 {
	if fraction <= 0 {
		return values[0]
	}
	if fraction >= 1 {
		return values[len(values)-1]
	}
	p := fraction * float32(len(values)-1)
	ip := int(p)
	p -= float32(ip)
	return (1-p)*values[ip] + p*values[min(ip+1, len(values)-1)]
}

// median is llama-perplexity's median of sorted values.
func median(v []float32) float32 {
	n := len(v)
	if n%2 == 0 {
		return 0.5 * (v[n/2] + v[n/2-1])
	}
	return v[n/2]
}

// minKLDReport is the fewest scored positions llama-perplexity prints the
// statistics for.
const minKLDReport = 100

// WriteKLDReport writes llama-perplexity's closing sections (perplexity,
// KL divergence and token probability statistics) for r. Like
// llama-perplexity it writes nothing for fewer than 100 scored positions,
// and then returns false.
func WriteKLDReport(w io.Writer, r *KLDResult) (bool, error) {
	s := &r.Stats
	if s.Count < minKLDReport || len(r.KLD) == 0 {
		return false, nil
	}
	kld := slices.Clone(r.KLD)
	pd := slices.Clone(r.PDiff)
	slices.Sort(kld)
	slices.Sort(pd)
	m := s.Summary()
	var b []byte
	p := func(format string, a ...any) { b = fmt.Appendf(b, format, a...) }
	p("====== Perplexity statistics ======\n")
	p("Mean PPL(Q)                   : %10.6f ± %10.6f\n", m.PPL, m.PPLUnc)
	p("Mean PPL(base)                : %10.6f ± %10.6f\n", m.PPLBase, m.PPLBaseUnc)
	p("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", 100*m.LogPPLCor)
	p("Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", m.LogRatio, m.LogRatioUnc)
	p("Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n", m.Ratio, m.RatioUnc)
	p("Mean PPL(Q)-PPL(base)         : %10.6f ± %10.6f\n", m.Diff, m.DiffUnc)
	p("\n")
	p("====== KL divergence statistics ======\n")
	p("Mean    KLD: %10.6f ± %10.6f\n", m.KLD, m.KLDUnc)
	p("Maximum KLD: %10.6f\n", kld[len(kld)-1])
	for _, f := range []struct {
		name string
		frac float32
	}{{"99.9%", 0.999}, {"99.0%", 0.990}, {"95.0%", 0.950}, {"90.0%", 0.900}} {
		p("%s   KLD: %10.6f\n", f.name, percentile(kld, f.frac))
	}
	p("Median  KLD: %10.6f\n", median(kld))
	for _, f := range []struct {
		name string
		frac float32
	}{{"10.0%", 0.100}, {" 5.0%", 0.050}, {" 1.0%", 0.010}, {" 0.1%", 0.001}} {
		p("%s   KLD: %10.6f\n", f.name, percentile(kld, f.frac))
	}
	p("Minimum KLD: %10.6f\n", kld[0])
	p("\n")
	p("====== Token probability statistics ======\n")
	p("Mean    Δp: %6.3f ± %5.3f %%\n", 100*m.PDiff, 100*m.PDiffUnc)
	p("Maximum Δp: %6.3f%%\n", 100*pd[len(pd)-1])
	for _, f := range []struct {
		name string
		frac float32
	}{{"99.9%", 0.999}, {"99.0%", 0.990}, {"95.0%", 0.950}, {"90.0%", 0.900}, {"75.0%", 0.750}} {
		p("%s   Δp: %6.3f%%\n", f.name, 100*float64(percentile(pd, f.frac)))
	}
	p("Median  Δp: %6.3f%%\n", 100*float64(median(pd)))
	for _, f := range []struct {
		name string
		frac float32
	}{{"25.0%", 0.250}, {"10.0%", 0.100}, {" 5.0%", 0.050}, {" 1.0%", 0.010}, {" 0.1%", 0.001}} {
		p("%s   Δp: %6.3f%%\n", f.name, 100*float64(percentile(pd, f.frac)))
	}
	p("Minimum Δp: %6.3f%%\n", 100*float64(pd[0]))
	p("RMS Δp    : %6.3f ± %5.3f %%\n", 100*m.PDiffRMS, 100*m.PDiffRMSUnc)
	p("Same top p: %6.3f ± %5.3f %%\n", 100*m.SameTop, 100*m.SameTopUnc)
	_, err := w.Write(b)
	return true, err
}
