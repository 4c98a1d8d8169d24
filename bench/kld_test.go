package bench

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

// logSoftmax is the plain reference: log p[i] in float64.
func logSoftmax(logits []float32) []float64 {
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = math.Max(mx, float64(v))
	}
	var s float64
	for _, v := range logits {
		s += math.Exp(float64(v) - mx)
	}
	out := make([]float64, len(logits))
	for i, v := range logits {
		out[i] = float64(v) - mx - math.Log(s)
	}
	return out
}

// decodeRow reads a stored row back: scale, min_log_prob and log p[i].
func decodeRow(row []byte, V int) (float32, float32, []float64) {
	scale := math.Float32frombits(binary.LittleEndian.Uint32(row[0:]))
	mn := math.Float32frombits(binary.LittleEndian.Uint32(row[4:]))
	out := make([]float64, V)
	for i := range out {
		out[i] = float64(scale*float32(binary.LittleEndian.Uint16(row[8+2*i:])) + mn)
	}
	return scale, mn, out
}

func TestNearestInt(t *testing.T) {
	for _, f := range []float32{0, 0.49, 0.5, 1.5, 2.5, 65534.6, 65535, 12345.5, -3.5} {
		if got, want := nearestInt(f), int32(math.RoundToEven(float64(f))); got != want {
			t.Errorf("nearestInt(%v) = %d, want %d", f, got, want)
		}
	}
}

// TestBaseRoundTrip writes a base of two chunks with odd n_vocab (a padded
// row) and reads it back: header, tokens, and every stored log-probability
// within half a quantization step of the exact one (those clipped below
// max-16 read back at the clip).
func TestBaseRoundTrip(t *testing.T) {
	const nCtx, V, nChunk = 8, 7, 2
	h := &BaseHeader{NCtx: nCtx, NVocab: V, NChunk: nChunk, Tokens: make([]int32, nCtx*nChunk)}
	for i := range h.Tokens {
		h.Tokens[i] = int32(i*3) % V
	}
	var buf bytes.Buffer
	bw, err := newBaseWriter(&buf, h)
	if err != nil {
		t.Fatal(err)
	}
	rows := make([][]float32, nChunk*scored(nCtx))
	for r := range rows {
		row := make([]float32, V)
		for i := range row {
			row[i] = float32(math.Sin(float64(r*V+i))) * 4
		}
		row[r%V] = -30 // below max-16: clipped
		rows[r] = row
	}
	for c := range nChunk {
		for j := range scored(nCtx) {
			tok := h.Tokens[c*nCtx+nCtx/2+j+1]
			nll := encodeRow(rows[c*scored(nCtx)+j], bw.row(j), tok)
			want := -logSoftmax(rows[c*scored(nCtx)+j])[tok]
			if math.Abs(nll-want) > 1e-5 {
				t.Errorf("row %d: nll %v, want %v", j, nll, want)
			}
		}
		if err := bw.writeChunk(); err != nil {
			t.Fatal(err)
		}
	}
	if err := bw.flush(); err != nil {
		t.Fatal(err)
	}
	if int64(buf.Len()) != h.Size() {
		t.Fatalf("%d bytes, header says %d", buf.Len(), h.Size())
	}
	if want := 8 + 12 + 4*nCtx*nChunk + nChunk*scored(nCtx)*(V+1+4)*2; buf.Len() != want {
		t.Fatalf("%d bytes, llama-perplexity's layout has %d", buf.Len(), want)
	}
	data := buf.Bytes()
	got, err := ReadBaseHeader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if got.NCtx != nCtx || got.NVocab != V || got.NChunk != nChunk || fmt.Sprint(got.Tokens) != fmt.Sprint(h.Tokens) {
		t.Fatalf("header %+v, want %+v", got, *h)
	}
	br := newBaseReader(bytes.NewReader(data[got.headerBytes():]), &got)
	for c := range nChunk {
		if err := br.readChunk(); err != nil {
			t.Fatal(err)
		}
		for j := range scored(nCtx) {
			row := rows[c*scored(nCtx)+j]
			scale, mn, lp := decodeRow(br.row(j), V)
			want := logSoftmax(row)
			top := slicesMax(want)
			for i := range V {
				w := max(want[i], top-16)
				if d := math.Abs(lp[i] - w); d > float64(scale)/2+1e-5 {
					t.Errorf("chunk %d row %d token %d: %v, want %v (scale %v, min %v)", c, j, i, lp[i], w, scale, mn)
				}
			}
			if pad := br.row(j)[8+2*V:]; !bytes.Equal(pad, []byte{0, 0}) {
				t.Errorf("padding %v, want zeros", pad)
			}
		}
	}
	if err := br.readChunk(); err == nil {
		t.Error("a third chunk read from a file of two")
	}
}

func slicesMax(v []float64) float64 {
	m := v[0]
	for _, x := range v {
		m = math.Max(m, x)
	}
	return m
}

// TestBaseHeaderErrors: each malformed header is an ErrBaseFile naming what
// is wrong, never a panic or a huge allocation.
func TestBaseHeaderErrors(t *testing.T) {
	h := &BaseHeader{NCtx: 8, NVocab: 5, NChunk: 1, Tokens: make([]int32, 8)}
	var good bytes.Buffer
	bw, _ := newBaseWriter(&good, h)
	_ = bw.writeChunk()
	_ = bw.flush()
	g := good.Bytes()
	le := func(b []byte, off int, v uint32) []byte {
		b = bytes.Clone(b)
		binary.LittleEndian.PutUint32(b[off:], v)
		return b
	}
	for _, c := range []struct {
		name string
		data []byte
		size int64
		want string
	}{
		{"empty", nil, 0, "truncated header"},
		{"magic", append([]byte("_logitz_"), g[8:]...), int64(len(g)), "does not start with"},
		{"short magic", []byte("GGUF\x03\x00\x00\x00\x00\x00"), 10, "does not start with"},
		{"n_ctx", le(g, 8, 2), int64(len(g)), "n_ctx 2 out of range"},
		{"n_vocab", le(g, 12, 0), int64(len(g)), "n_vocab 0 out of range"},
		{"negative n_chunk", le(g, 16, 0xffffffff), int64(len(g)), "n_chunk -1"},
		{"huge n_chunk", le(g, 16, 1<<30), int64(len(g)), "truncated"},
		{"truncated rows", g[:len(g)-3], int64(len(g) - 3), "truncated"},
		{"trailing bytes", append(bytes.Clone(g), 0), int64(len(g) + 1), "too long"},
		{"truncated tokens, size unknown", g[:30], -1, "truncated in the tokens"},
		{"huge n_chunk, size unknown", le(g, 16, 1<<30), -1, "file size is unknown"},
		{"overflowing sizes", le(le(le(g, 8, 1<<24), 12, 1<<24), 16, 1<<30), int64(len(g)), "more bytes than a file can hold"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ReadBaseHeader(bytes.NewReader(c.data), c.size)
			if !errors.Is(err, ErrBaseFile) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want ErrBaseFile with %q", err, c.want)
			}
		})
	}
	// rows cut short with the size unknown: an error naming the chunk
	got, err := ReadBaseHeader(bytes.NewReader(g), -1)
	if err != nil {
		t.Fatal(err)
	}
	br := newBaseReader(bytes.NewReader(g[got.headerBytes():len(g)-1]), &got)
	if err := br.readChunk(); !errors.Is(err, ErrBaseFile) || !strings.Contains(err.Error(), "truncated in chunk 1") {
		t.Errorf("error %v", err)
	}
}

func TestCheckTokens(t *testing.T) {
	h := &BaseHeader{NCtx: 4, NVocab: 9, NChunk: 2, Tokens: []int32{1, 2, 3, 4, 5, 6, 7, 8}}
	if err := h.CheckTokens([]int32{1, 2, 3, 4, 5, 6, 7, 8, 0}); err != nil {
		t.Error(err)
	}
	if err := h.CheckTokens([]int32{1, 2, 3}); err == nil || !strings.Contains(err.Error(), "the text has 3 tokens") {
		t.Errorf("short text: %v", err)
	}
	if err := h.CheckTokens([]int32{1, 2, 3, 4, 5, 0, 7, 8}); err == nil || !strings.Contains(err.Error(), "token 5 (chunk 2, position 1) is 6 in the base and 0 in the text") {
		t.Errorf("different text: %v", err)
	}
}

// handRow is a case to check by hand: the base is uniform over two tokens
// (logits 0, 0), this run has p = (3/4, 1/4) (logits ln 3, 0), and the next
// token is 1. KLD = ½ ln(½/¾) + ½ ln(½/¼) = ½ ln(4/3); Δp = ¼ - ½; both put
// token 0 on top (the base by its first maximum).
func handRow(t *testing.T) (base []byte, logits []float32) {
	base = make([]byte, 2*rowWords(2))
	nll := encodeRow([]float32{0, 0}, base, 1)
	if math.Abs(nll-math.Ln2) > 1e-6 {
		t.Fatalf("base nll %v, want ln 2", nll)
	}
	return base, []float32{float32(math.Log(3)), 0}
}

func TestScoreRowByHand(t *testing.T) {
	base, logits := handRow(t)
	var s KLDStats
	kld, pd := s.scoreRow(logits, base, 1)
	if want := 0.5 * math.Log(4.0/3); math.Abs(kld-want) > 1e-6 {
		t.Errorf("KLD %v, want %v", kld, want)
	}
	if math.Abs(float64(pd)+0.25) > 1e-6 {
		t.Errorf("Δp %v, want -0.25", pd)
	}
	if s.Count != 1 || s.NSameTop != 1 {
		t.Errorf("count %d, same top %d", s.Count, s.NSameTop)
	}
	if math.Abs(s.SumNLL-math.Log(4)) > 1e-6 || math.Abs(s.SumNLLBase-math.Ln2) > 1e-6 {
		t.Errorf("nll %v (want ln 4), base %v (want ln 2)", s.SumNLL, s.SumNLLBase)
	}
	// the other way round the tops differ: this run's top is token 1
	var s2 KLDStats
	s2.scoreRow([]float32{0, 1}, base, 1)
	if s2.NSameTop != 0 {
		t.Error("tops 1 and 0 counted as the same")
	}
}

// TestKLDReportByHand: 200 positions, half the hand row scored on token 1
// and half on token 0, so every figure is known: PPL(Q) = exp(½ ln 4 + ½
// ln(4/3)), PPL(base) = 2, KLD ½ ln(4/3) everywhere, Δp ∓¼.
func TestKLDReportByHand(t *testing.T) {
	base, logits := handRow(t)
	var r KLDResult
	for i := range 200 {
		k, p := r.Stats.scoreRow(logits, base, int32(i%2))
		r.KLD = append(r.KLD, float32(k))
		r.PDiff = append(r.PDiff, p)
	}
	var out bytes.Buffer
	if ok, err := WriteKLDReport(&out, &r); !ok || err != nil {
		t.Fatalf("%v %v", ok, err)
	}
	ppl := math.Exp(0.5*math.Log(4) + 0.5*math.Log(4.0/3))
	// the NLL of Q is ln 4 or ln(4/3): standard deviation ½ ln 3
	sd := 0.5 * math.Log(3) / math.Sqrt(199)
	for _, want := range []string{
		"====== Perplexity statistics ======\n",
		fmt.Sprintf("Mean PPL(Q)                   : %10.6f ± %10.6f\n", ppl, ppl*sd),
		"Mean PPL(base)                :   2.000000 ±   0.000000\n",
		fmt.Sprintf("Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", math.Log(ppl/2), sd),
		fmt.Sprintf("Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n", ppl/2, ppl/2*sd),
		"====== KL divergence statistics ======\n",
		fmt.Sprintf("Mean    KLD: %10.6f ± %10.6f\n", 0.5*math.Log(4.0/3), 0.0),
		fmt.Sprintf("Median  KLD: %10.6f\n", 0.5*math.Log(4.0/3)),
		"====== Token probability statistics ======\n",
		fmt.Sprintf("Mean    Δp: %6.3f ± %5.3f %%\n", 0.0, 25/math.Sqrt(199)),
		"Maximum Δp: 25.000%\n",
		"Minimum Δp: -25.000%\n",
		"Median  Δp:  0.000%\n",
		"RMS Δp    : 25.000 ± 0.000 %\n",
		"Same top p: 100.000 ± 0.000 %\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	// fewer than 100 positions: nothing, as llama-perplexity
	r.Stats.Count = 99
	out.Reset()
	if ok, _ := WriteKLDReport(&out, &r); ok || out.Len() != 0 {
		t.Errorf("report for 99 positions: %q", out.String())
	}
}

func TestPercentile(t *testing.T) {
	v := []float32{1, 2, 3, 4, 5}
	for _, c := range []struct{ f, want float32 }{{0, 1}, {1, 5}, {0.5, 3}, {0.1, 1.4}, {0.99, 4.96}} {
		if got := percentile(v, c.f); math.Abs(float64(got-c.want)) > 1e-5 {
			t.Errorf("percentile %v = %v, want %v", c.f, got, c.want)
		}
	}
	if median(v) != 3 || median(v[:4]) != 2.5 {
		t.Errorf("median %v %v", median(v), median(v[:4]))
	}
}

// BenchmarkRows: encoding and scoring one row of a 151936-token vocabulary
// (Qwen's), the per-position cost on top of the forward pass.
func BenchmarkRows(b *testing.B) {
	const V = 151936
	logits := make([]float32, V)
	for i := range logits {
		logits[i] = float32(math.Sin(float64(i))) * 8
	}
	row := make([]byte, 2*rowWords(V))
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			encodeRow(logits, row, 7)
		}
	})
	b.Run("score", func(b *testing.B) {
		b.ReportAllocs()
		var s KLDStats
		for b.Loop() {
			s.scoreRow(logits, row, 7)
		}
	})
}

// FuzzBase: any bytes as a base file (size known, and unknown) are read
// without a panic; what reads as a header then has its chunks read until
// the first error, and a row scored against a run of its vocabulary.
func FuzzBase(f *testing.F) {
	h := &BaseHeader{NCtx: 4, NVocab: 3, NChunk: 2, Tokens: []int32{0, 1, 2, 0, 1, 2, 0, 1}}
	var buf bytes.Buffer
	bw, _ := newBaseWriter(&buf, h)
	for range 2 {
		encodeRow([]float32{1, 2, 3}, bw.row(0), 1)
		_ = bw.writeChunk()
	}
	_ = bw.flush()
	f.Add(buf.Bytes())
	f.Add([]byte(logitsMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, size := range []int64{int64(len(data)), -1} {
			h, err := ReadBaseHeader(bytes.NewReader(data), size)
			if err != nil {
				if !errors.Is(err, ErrBaseFile) {
					t.Fatalf("error %v is not ErrBaseFile", err)
				}
				continue
			}
			// the chunks: buffers grow with the bytes that arrive, whatever
			// the header claims
			br := newBaseReader(bytes.NewReader(data[h.headerBytes():]), &h)
			var logits []float32
			if h.NVocab <= 1<<12 {
				logits = make([]float32, h.NVocab)
			}
			var s KLDStats
			for range h.NChunk {
				if err := br.readChunk(); err != nil {
					if !errors.Is(err, ErrBaseFile) {
						t.Fatalf("error %v is not ErrBaseFile", err)
					}
					break
				}
				if logits != nil {
					s.scoreRow(logits, br.row(0), 0)
				}
			}
		}
	})
}
