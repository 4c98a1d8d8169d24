// decode.go: token ids back to bytes — Piece (llama_token_to_piece), Decode
// (llama_detokenize) and a streaming Decoder that only emits whole UTF-8
// characters.

package tokenizer

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// buildPieces renders every token as llama_token_to_piece with special
// rendering on (llama.cpp's token-to-piece cache).
func (t *Tokenizer) buildPieces() {
	t.pieceOff = make([]int32, len(t.tokens)+1)
	var data []byte
	for id, text := range t.tokens {
		a := t.attrs[id]
		switch {
		case a&(attrUnknown|attrControl|attrUserDefined) != 0:
			data = append(data, text...)
		case a&attrNormal != 0:
			switch {
			case t.typ == modelSPM || t.pre.escapeWS:
				data = appendUnescaped(data, text)
			default:
				data = appendByteDecoded(data, text)
			}
		case a&attrByte != 0:
			data = append(data, byteTokenValue(text))
		}
		t.pieceOff[id+1] = int32(len(data))
	}
	t.pieceData = data
}

// appendUnescaped appends text with every U+2581 replaced by a space.
func appendUnescaped(dst []byte, text string) []byte {
	for {
		i := strings.Index(text, "\u2581")
		if i < 0 {
			return append(dst, text...)
		}
		dst = append(dst, text[:i]...)
		dst = append(dst, ' ')
		text = text[i+len("\u2581"):]
	}
}

// byteTokenValue parses the two hex digits of a "<0xXX>" token like
// llama.cpp's token_to_byte (strtol: parsing stops at a non-hex digit).
func byteTokenValue(text string) byte {
	if len(text) < 4 {
		return 0
	}
	var v byte
	for _, c := range []byte(text[3:min(5, len(text))]) {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return v
		}
		v = v<<4 | d
	}
	return v
}

// appendByteDecoded maps a byte-level BPE token text back to its bytes
// (llama_decode_text); a codepoint that is no byte image is rendered as
// llama.cpp does, "[UNK_BYTE_0x<hex>" + text + "]".
func appendByteDecoded(dst []byte, text string) []byte {
	var cps [64]rune
	for _, r := range appendCpts(cps[:0], text) {
		if r >= 0 && int(r) < len(runeBytes) && runeBytes[r] >= 0 {
			dst = append(dst, byte(runeBytes[r]))
			continue
		}
		dst = append(dst, "[UNK_BYTE_0x"...)
		var u [4]byte
		for _, b := range appendUTF8(u[:0], r) {
			dst = fmt.Appendf(dst, "%02x", b)
		}
		dst = append(dst, text...)
		dst = append(dst, ']')
	}
	return dst
}

// piece returns the cached piece of id, or nil.
func (t *Tokenizer) piece(id int32, renderSpecial bool) []byte {
	if !t.valid(id) {
		return nil
	}
	if !renderSpecial && t.attrs[id]&(attrUnknown|attrControl) != 0 {
		return nil
	}
	return t.pieceData[t.pieceOff[id]:t.pieceOff[id+1]:t.pieceOff[id+1]]
}

// Piece returns the bytes of one token like llama_token_to_piece (lstrip
// 0): SPM turns U+2581 into spaces and <0xXX> tokens into their byte;
// byte-level BPE maps its characters back to bytes; control and unknown
// tokens are empty unless renderSpecial; user-defined tokens are their raw
// text. The result is a fresh copy; out-of-range ids give nil.
func (t *Tokenizer) Piece(id int32, renderSpecial bool) []byte {
	p := t.piece(id, renderSpecial)
	if p == nil {
		return nil
	}
	return append([]byte(nil), p...)
}

// AppendPiece appends Piece(id, renderSpecial) to dst.
func (t *Tokenizer) AppendPiece(dst []byte, id int32, renderSpecial bool) []byte {
	return append(dst, t.piece(id, renderSpecial)...)
}

// Decode converts ids to text like llama.cpp's common_detokenize
// (llama_detokenize with remove_special off and unparse_special =
// renderSpecial). It concatenates the pieces, with two differences from
// plain concatenation:
//   - when the vocabulary adds a space prefix (SPM), the first token's piece
//     loses one leading space. Only the very first id counts: after a
//     leading BOS (rendered empty or not) the space stays, so
//     Decode([BOS, ▁Once]) is " Once" and Decode([▁Once]) is "Once";
//   - vocabularies with clean_up_tokenization_spaces (most GPT-2-style BPE
//     pre-tokenizers) drop the space before . , ! ? and before 's 'm 're
//     've, and the spaces around a lone '.
//
// The result holds the raw bytes and need not be valid UTF-8. For
// token-by-token output use a Decoder.
func (t *Tokenizer) Decode(ids []int32, renderSpecial bool) string {
	var buf []byte
	for i, id := range ids {
		p := t.piece(id, renderSpecial)
		if i == 0 && t.addSpacePrefix && len(p) > 0 && p[0] == ' ' {
			p = p[1:]
		}
		buf = append(buf, p...)
	}
	if t.clean {
		buf = cleanSpaces(buf)
	}
	return string(buf)
}

// cleanSpaces is llama_detokenize's clean_up_tokenization_spaces, three
// in-place passes with the same quirks.
func cleanSpaces(text []byte) []byte {
	// " ?", " !", " .", " ,": drop the space
	total := len(text)
	n := min(total, 1)
	for i := 1; i < total; i++ {
		x := text[i]
		if text[i-1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',') {
			n--
		}
		text[n] = x
		n++
	}
	// " ' ": drop both spaces
	total = n
	n = min(total, 1)
	for i := 1; i < total; i++ {
		x := text[i]
		if x == '\'' && i+1 < total && text[i-1] == ' ' && text[i+1] == ' ' {
			n--
			i++
			text[i] = 0
		}
		text[n] = x
		n++
	}
	// " 's", " 'm", " 're", " 've": drop the space
	total = n
	n = min(total, 1)
	for i := 1; i < total; i++ {
		x := text[i]
		if text[i-1] == ' ' && x == '\'' && i+1 < total {
			x1 := text[i+1]
			switch {
			case x1 == 's' || x1 == 'm':
				n--
			case x1 == 't' || x1 == 'd':
			case i+2 < total:
				x2 := text[i+2]
				if x1 == 'r' && x2 == 'e' || x1 == 'v' && x2 == 'e' {
					n--
				}
			}
		}
		text[n] = x
		n++
	}
	return text[:n]
}

// Decoder turns a stream of token ids into text, emitting only complete
// UTF-8 characters. Pieces are those of Piece (no leading-space stripping,
// no space cleanup: what llama.cpp's examples print token by token).
// Each byte that can never be part of a valid character comes out as one
// U+FFFD.
// A Decoder is not safe for concurrent use.
type Decoder struct {
	t             *Tokenizer
	renderSpecial bool
	preserve      []int32 // control tokens rendered anyway
	pending       []byte
}

// Preserve renders the control tokens ids as text even without
// renderSpecial: llama-server's preserved tokens, the markers tool calls
// start with (<|python_tag|>, [TOOL_CALLS]).
func (d *Decoder) Preserve(ids []int32) { d.preserve = ids }

// NewDecoder returns a streaming decoder.
func (t *Tokenizer) NewDecoder(renderSpecial bool) *Decoder {
	return &Decoder{t: t, renderSpecial: renderSpecial}
}

// Add appends the piece of id and returns the text that is now complete;
// a trailing incomplete UTF-8 sequence is held back.
func (d *Decoder) Add(id int32) string {
	d.pending = append(d.pending, d.t.piece(id, d.renderSpecial || len(d.preserve) > 0 && slices.Contains(d.preserve, id))...)
	n := len(d.pending) - incompleteSuffix(d.pending)
	if n == 0 {
		return ""
	}
	s := validString(d.pending[:n])
	d.pending = append(d.pending[:0], d.pending[n:]...)
	return s
}

// Flush returns whatever is held back, each invalid byte replaced by
// U+FFFD, and resets the decoder.
func (d *Decoder) Flush() string {
	s := validString(d.pending)
	d.pending = d.pending[:0]
	return s
}

// incompleteSuffix returns the length of the longest suffix of b that is a
// proper prefix of a well-formed UTF-8 sequence (0 to 3 bytes).
func incompleteSuffix(b []byte) int {
	for k := 1; k <= 3 && k <= len(b); k++ {
		lead := b[len(b)-k]
		if lead < 0x80 {
			return 0
		}
		if lead < 0xC0 {
			continue // continuation byte: look further back
		}
		need := utf8SeqLen(lead)
		if lead < 0xC2 || lead > 0xF4 || k >= need {
			return 0
		}
		// check that the bytes after lead can still start a valid sequence
		if validPrefix(b[len(b)-k:]) {
			return k
		}
		return 0
	}
	return 0
}

// validPrefix reports whether p (lead byte first, shorter than the full
// sequence) can be completed to a well-formed UTF-8 sequence.
func validPrefix(p []byte) bool {
	lo, hi := byte(0x80), byte(0xBF)
	switch p[0] {
	case 0xE0:
		lo = 0xA0
	case 0xED:
		hi = 0x9F
	case 0xF0:
		lo = 0x90
	case 0xF4:
		hi = 0x8F
	}
	for i, c := range p[1:] {
		if i == 0 && (c < lo || c > hi) || i > 0 && !isCont(c) {
			return false
		}
	}
	return true
}

// validString converts b to a string, replacing every byte that is not
// part of a well-formed UTF-8 sequence by U+FFFD (as Go's range over a
// string does, and as the golden gen_text was made).
func validString(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	sb.Grow(len(b) + 8)
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r == utf8.RuneError && size == 1 {
			sb.WriteRune(utf8.RuneError)
		} else {
			sb.Write(b[:size])
		}
		b = b[size:]
	}
	return sb.String()
}
