package bench

// The KL-divergence base file, byte for byte llama-perplexity's
// --kl-divergence-base format (tools/perplexity/perplexity.cpp), so a base
// saved by either program is read by the other. All fields little-endian:
//
//	"_logits_"                          8 bytes
//	n_ctx, n_vocab, n_chunk             int32 each
//	tokens                              int32 × n_chunk·n_ctx (as tokenized, BOS not substituted)
//	per chunk, per scored position      (n_ctx - 1 - n_ctx/2 positions)
//	    scale, min_log_prob             float32 each
//	    q                               uint16 × n_vocab, padded with a 0 to an even count
//
// A row stores the log-softmax of the logits: log p[i] = scale·q[i] +
// min_log_prob, where the range is clipped to 16 below the maximum logit
// (everything below stores 0). The file is read and written one chunk at a
// time; nothing holds the whole of it.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
)

// logitsMagic opens every base file.
const logitsMagic = "_logits_"

// ErrBaseFile is wrapped by every error about a malformed or mismatched
// base file.
var ErrBaseFile = errors.New("bench: KL-divergence base file")

// BaseHeader is the header of a base file.
type BaseHeader struct {
	NCtx, NVocab, NChunk int
	Tokens               []int32 // NChunk·NCtx
}

// scored is the number of positions a chunk of nCtx scores.
func scored(nCtx int) int { return nCtx - 1 - nCtx/2 }

// rowWords is the number of uint16 words in one stored row.
func rowWords(nVocab int) int { return 2*((nVocab+1)/2) + 4 }

// ChunkBytes is the size of one chunk's rows.
func (h *BaseHeader) ChunkBytes() int64 {
	return int64(scored(h.NCtx)) * int64(rowWords(h.NVocab)) * 2
}

// headerBytes is the size of the header.
func (h *BaseHeader) headerBytes() int64 { return 8 + 12 + 4*int64(len(h.Tokens)) }

// Size is the size of the whole file.
func (h *BaseHeader) Size() int64 { return h.headerBytes() + int64(h.NChunk)*h.ChunkBytes() }

// writeBaseHeader writes the header.
func writeBaseHeader(w io.Writer, h *BaseHeader) error {
	b := make([]byte, 0, h.headerBytes())
	b = append(b, logitsMagic...)
	b = binary.LittleEndian.AppendUint32(b, uint32(h.NCtx))
	b = binary.LittleEndian.AppendUint32(b, uint32(h.NVocab))
	b = binary.LittleEndian.AppendUint32(b, uint32(h.NChunk))
	for _, t := range h.Tokens {
		b = binary.LittleEndian.AppendUint32(b, uint32(t))
	}
	_, err := w.Write(b)
	return err
}

// maxBaseDim caps n_ctx and n_vocab read from a file.
const maxBaseDim = 1 << 24

// ReadBaseHeader reads and checks a base file's header. size is the file's
// size in bytes (-1 if unknown, e.g. a pipe): when known, a file shorter or
// longer than the header says is an error before anything is allocated
// beyond the header's first 20 bytes.
func ReadBaseHeader(r io.Reader, size int64) (BaseHeader, error) {
	var h BaseHeader
	var fixed [20]byte
	if n, err := io.ReadFull(r, fixed[:]); err != nil {
		if n >= 8 && string(fixed[:8]) != logitsMagic {
			return h, fmt.Errorf("%w: does not start with %q (not a llama-perplexity --kl-divergence-base file)", ErrBaseFile, logitsMagic)
		}
		return h, fmt.Errorf("%w: truncated header (%d of 20 bytes)", ErrBaseFile, n)
	}
	if string(fixed[:8]) != logitsMagic {
		return h, fmt.Errorf("%w: does not start with %q (not a llama-perplexity --kl-divergence-base file)", ErrBaseFile, logitsMagic)
	}
	nCtx := int32(binary.LittleEndian.Uint32(fixed[8:]))
	nVocab := int32(binary.LittleEndian.Uint32(fixed[12:]))
	nChunk := int32(binary.LittleEndian.Uint32(fixed[16:]))
	switch {
	case nCtx < 4 || nCtx > maxBaseDim:
		return h, fmt.Errorf("%w: n_ctx %d out of range [4, %d]", ErrBaseFile, nCtx, maxBaseDim)
	case nVocab < 1 || nVocab > maxBaseDim:
		return h, fmt.Errorf("%w: n_vocab %d out of range [1, %d]", ErrBaseFile, nVocab, maxBaseDim)
	case nChunk < 1:
		return h, fmt.Errorf("%w: n_chunk %d must be positive", ErrBaseFile, nChunk)
	}
	h.NCtx, h.NVocab, h.NChunk = int(nCtx), int(nVocab), int(nChunk)
	// n_ctx, n_vocab < 2^24 and n_chunk < 2^31: nTok and a chunk's bytes
	// (< 2^48) fit in int64, all chunks' bytes may not
	nTok := int64(h.NChunk) * int64(h.NCtx)
	if h.ChunkBytes() > (math.MaxInt64/2)/int64(h.NChunk) {
		return h, fmt.Errorf("%w: %d chunks of n_ctx %d and n_vocab %d: more bytes than a file can hold", ErrBaseFile, h.NChunk, h.NCtx, h.NVocab)
	}
	want := 20 + 4*nTok + int64(h.NChunk)*h.ChunkBytes()
	if size >= 0 && size != want {
		what := "truncated"
		if size > want {
			what = "too long"
		}
		return h, fmt.Errorf("%w: %s: %d bytes, but %d chunks of n_ctx %d and n_vocab %d take %d", ErrBaseFile, what, size, h.NChunk, h.NCtx, h.NVocab, want)
	}
	if size < 0 && nTok > 1<<28 {
		return h, fmt.Errorf("%w: %d tokens in the header (more than %d) and the file size is unknown", ErrBaseFile, nTok, 1<<28)
	}
	// read in blocks, so that a header claiming more tokens than a pipe
	// delivers allocates no more than what arrived
	const block = 1 << 16
	var buf [4 * block]byte
	h.Tokens = make([]int32, 0, min(nTok, block))
	for int64(len(h.Tokens)) < nTok {
		n := min(nTok-int64(len(h.Tokens)), block)
		if got, err := io.ReadFull(r, buf[:4*n]); err != nil {
			return h, fmt.Errorf("%w: truncated in the tokens (%d of %d bytes)", ErrBaseFile, 4*int64(len(h.Tokens))+int64(got), 4*nTok)
		}
		for i := range n {
			h.Tokens = append(h.Tokens, int32(binary.LittleEndian.Uint32(buf[4*i:])))
		}
	}
	return h, nil
}

// baseWriter writes a base file one chunk at a time.
type baseWriter struct {
	w     *bufio.Writer
	chunk []byte // one chunk's rows
	V     int
}

// newBaseWriter writes h's header to w and returns a writer for the chunks.
func newBaseWriter(w io.Writer, h *BaseHeader) (*baseWriter, error) {
	bw := bufio.NewWriterSize(w, 1<<20)
	if err := writeBaseHeader(bw, h); err != nil {
		return nil, err
	}
	return &baseWriter{w: bw, chunk: make([]byte, h.ChunkBytes()), V: h.NVocab}, nil
}

// row returns the bytes of scored row j of the current chunk.
func (bw *baseWriter) row(j int) []byte {
	n := 2 * rowWords(bw.V)
	return bw.chunk[j*n : (j+1)*n]
}

// writeChunk writes the current chunk's rows.
func (bw *baseWriter) writeChunk() error {
	_, err := bw.w.Write(bw.chunk)
	return err
}

// flush writes what is buffered.
func (bw *baseWriter) flush() error { return bw.w.Flush() }

// baseReader reads a base file's chunks after its header.
type baseReader struct {
	r     *bufio.Reader
	chunk []byte // the chunk read last; grows to one chunk while the first arrives
	size  int64  // bytes of a chunk
	V     int
	next  int // chunk read next
}

func newBaseReader(r io.Reader, h *BaseHeader) *baseReader {
	return &baseReader{r: bufio.NewReaderSize(r, 1<<20), size: h.ChunkBytes(), V: h.NVocab}
}

// readChunk reads the next chunk's rows. The buffer grows as the first
// chunk's bytes arrive, so a header claiming a huge chunk allocates no more
// than the file holds.
func (br *baseReader) readChunk() error {
	var done int64
	if int64(len(br.chunk)) == br.size {
		n, err := io.ReadFull(br.r, br.chunk)
		if done = int64(n); err == nil {
			br.next++
			return nil
		}
	} else {
		for br.chunk = br.chunk[:0]; int64(len(br.chunk)) < br.size; {
			n := int(min(br.size-int64(len(br.chunk)), 1<<20))
			l := len(br.chunk)
			br.chunk = slices.Grow(br.chunk, n)[:l+n]
			got, err := io.ReadFull(br.r, br.chunk[l:])
			if err != nil {
				done = int64(l + got)
				br.chunk = br.chunk[:0]
				break
			}
		}
		if int64(len(br.chunk)) == br.size {
			br.next++
			return nil
		}
	}
	return fmt.Errorf("%w: truncated in chunk %d (%d of %d bytes)", ErrBaseFile, br.next+1, done, br.size)
}

// row returns the bytes of scored row j of the chunk read last.
func (br *baseReader) row(j int) []byte {
	n := 2 * rowWords(br.V)
	return br.chunk[j*n : (j+1)*n]
}

// nearestInt rounds as llama.cpp's nearest_int (valid for |f| < 2^22).
func nearestInt(f float32) int32 {
	v := f + 12582912
	return int32(math.Float32bits(v)&0x007fffff) - 0x00400000
}

// expf is C's expf on float32 (rounded from the float64 exp).
func expf(x float32) float32 { return float32(math.Exp(float64(x))) }

// encodeRow stores the log-softmax of logits in dst (2·rowWords bytes, as
// llama.cpp's log_softmax with a uint16 output) and returns the negative
// log-likelihood of tok.
func encodeRow(logits []float32, dst []byte, tok int32) float64 {
	mx, mn := logits[0], logits[0]
	for _, v := range logits[1:] {
		mx = max(mx, v)
		mn = min(mn, v)
	}
	mn = max(mn, mx-16)
	var sum float64
	for _, v := range logits {
		sum += float64(expf(v - mx))
	}
	lse := float32(math.Log(sum))
	minLogProb := mn - mx - lse
	scale := (mx - mn) / 65535
	binary.LittleEndian.PutUint32(dst[0:], math.Float32bits(scale))
	binary.LittleEndian.PutUint32(dst[4:], math.Float32bits(minLogProb))
	q := dst[8:]
	clear(q)
	if scale != 0 {
		inv := 1 / scale
		for i, v := range logits {
			if v > mn {
				binary.LittleEndian.PutUint16(q[2*i:], uint16(nearestInt(inv*(v-mn))))
			}
		}
	}
	return float64(mx + lse - logits[tok])
}
