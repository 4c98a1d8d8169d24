// unicode.go: the codepoint layer the tokenizers share — UTF-8 decoding with
// llama.cpp's leniency, per-codepoint category flags, and GPT-2's byte to
// unicode mapping.
//
// Categories come from Go's unicode tables (Unicode 15.0) plus the few
// codepoints Unicode 15.1 added, which llama.cpp's generated table (15.1)
// already classifies. A one-off comparison of every codepoint against
// llama.cpp's table found no other difference. If Go moves to a newer
// Unicode version, codepoints assigned after 15.1 will classify differently
// from llama.cpp (they are "undefined" there).

package tokenizer

import "unicode"

// Codepoint flags, with llama.cpp's bit values (unicode_cpt_flags).
const (
	flagUndefined  = 0x0001
	flagNumber     = 0x0002 // \p{N}
	flagLetter     = 0x0004 // \p{L}
	flagSeparator  = 0x0008 // \p{Z}
	flagMark       = 0x0010 // \p{M}
	flagPunct      = 0x0020 // \p{P}
	flagSymbol     = 0x0040 // \p{S}
	flagControl    = 0x0080 // \p{C}
	flagCategories = 0x00FF
	flagWhitespace = 0x0100 // White_Space property (what llama.cpp calls \s)
)

// maxCodepoint bounds the codepoints llama.cpp has flags for.
const maxCodepoint = 0x110000

// asciiFlags caches the flags of the first 256 codepoints (immutable).
var asciiFlags = func() (t [256]uint16) {
	for r := range t {
		t[r] = computeFlags(rune(r))
	}
	return t
}()

// cptFlags returns llama.cpp's flags of a codepoint; 0 never occurs for a
// codepoint (callers use 0 for "out of range").
func cptFlags(r rune) uint16 {
	if r >= 0 && r < 256 {
		return asciiFlags[r]
	}
	return computeFlags(r)
}

func computeFlags(r rune) uint16 {
	if r < 0 || r >= maxCodepoint {
		return flagUndefined
	}
	var f uint16
	switch {
	case unicode.IsLetter(r):
		f = flagLetter
	case unicode.IsNumber(r):
		f = flagNumber
	case unicode.IsMark(r):
		f = flagMark
	case unicode.IsPunct(r):
		f = flagPunct
	case unicode.IsSymbol(r):
		f = flagSymbol
	case unicode.In(r, unicode.Z):
		f = flagSeparator
	case unicode.In(r, unicode.Cc, unicode.Cf, unicode.Cs, unicode.Co):
		f = flagControl
	default:
		f = unicode151(r)
	}
	if unicode.Is(unicode.White_Space, r) {
		f |= flagWhitespace
	}
	return f
}

// unicode151 classifies codepoints that are unassigned in Unicode 15.0 but
// assigned in 15.1 (llama.cpp's table version).
func unicode151(r rune) uint16 {
	switch {
	case r >= 0x2EBF0 && r <= 0x2EE5D: // CJK Unified Ideographs Extension I (Lo)
		return flagLetter
	case r >= 0x2FFC && r <= 0x2FFF, r == 0x31EF: // ideographic description characters (So)
		return flagSymbol
	}
	return flagUndefined
}

// utf8SeqLen is llama.cpp's unicode_len_utf8: the sequence length implied by
// a lead byte, looking only at its high nibble (continuation bytes count 1).
func utf8SeqLen(b byte) int {
	switch b >> 4 {
	case 0xC, 0xD:
		return 2
	case 0xE:
		return 3
	case 0xF:
		return 4
	}
	return 1
}

// appendCpts decodes s into codepoints the way llama.cpp's
// unicode_cpts_from_utf8 does: overlong forms and surrogates are accepted,
// each byte that does not start a complete sequence becomes U+FFFD and
// decoding resumes at the next byte. Values above U+10FFFF (lead bytes
// F5..F7), on which llama.cpp throws later, also become U+FFFD here.
func appendCpts(dst []rune, s string) []rune {
	for i := 0; i < len(s); {
		b := s[i]
		switch {
		case b < 0x80:
			dst = append(dst, rune(b))
			i++
			continue
		case b&0x40 == 0: // stray continuation byte
		case b&0x20 == 0:
			if i+1 < len(s) && isCont(s[i+1]) {
				dst = append(dst, rune(b&0x1F)<<6|rune(s[i+1]&0x3F))
				i += 2
				continue
			}
		case b&0x10 == 0:
			if i+2 < len(s) && isCont(s[i+1]) && isCont(s[i+2]) {
				dst = append(dst, rune(b&0x0F)<<12|rune(s[i+1]&0x3F)<<6|rune(s[i+2]&0x3F))
				i += 3
				continue
			}
		case b&0x08 == 0:
			if i+3 < len(s) && isCont(s[i+1]) && isCont(s[i+2]) && isCont(s[i+3]) {
				r := rune(b&0x07)<<18 | rune(s[i+1]&0x3F)<<12 | rune(s[i+2]&0x3F)<<6 | rune(s[i+3]&0x3F)
				if r >= maxCodepoint {
					r = 0xFFFD
				}
				dst = append(dst, r)
				i += 4
				continue
			}
		}
		dst = append(dst, 0xFFFD)
		i++
	}
	return dst
}

func isCont(b byte) bool { return b&0xC0 == 0x80 }

// appendUTF8 encodes one codepoint like llama.cpp's unicode_cpt_to_utf8:
// surrogates are encoded as three bytes (Go's utf8 would substitute them).
func appendUTF8(dst []byte, r rune) []byte {
	switch {
	case r < 0:
		return append(dst, 0xEF, 0xBF, 0xBD)
	case r <= 0x7F:
		return append(dst, byte(r))
	case r <= 0x7FF:
		return append(dst, 0xC0|byte(r>>6), 0x80|byte(r&0x3F))
	case r <= 0xFFFF:
		return append(dst, 0xE0|byte(r>>12), 0x80|byte(r>>6&0x3F), 0x80|byte(r&0x3F))
	case r < maxCodepoint:
		return append(dst, 0xF0|byte(r>>18), 0x80|byte(r>>12&0x3F), 0x80|byte(r>>6&0x3F), 0x80|byte(r&0x3F))
	}
	return append(dst, 0xEF, 0xBF, 0xBD)
}

// byteRunes maps each byte to the printable codepoint GPT-2's byte-level BPE
// uses for it: printable Latin-1 bytes map to themselves, the other 68 to
// U+0100 onwards, in byte order.
var byteRunes = func() (t [256]rune) {
	n := rune(0)
	for b := range 256 {
		if b >= 0x21 && b <= 0x7E || b >= 0xA1 && b <= 0xAC || b >= 0xAE {
			t[b] = rune(b)
		} else {
			t[b] = 256 + n
			n++
		}
	}
	return t
}()

// runeBytes inverts byteRunes; -1 marks codepoints that are not byte images.
var runeBytes = func() (t [324]int16) {
	for i := range t {
		t[i] = -1
	}
	for b, r := range byteRunes {
		t[r] = int16(b)
	}
	return t
}()

// byteRuneUTF8 holds the UTF-8 encoding of byteRunes[b], for fast appends.
var byteRuneUTF8 = func() (t [256]string) {
	for b, r := range byteRunes {
		t[b] = string(appendUTF8(nil, r))
	}
	return t
}()

// asciiLower folds ASCII letters; llama.cpp's unicode_tolower maps no other
// codepoint onto the ASCII letters its contraction rules look for.
func asciiLower(r rune) rune {
	if r >= 'A' && r <= 'Z' {
		return r + ('a' - 'A')
	}
	return r
}

// isCSpace is C's isspace in the "C" locale.
func isCSpace(b byte) bool {
	return b == ' ' || b >= '\t' && b <= '\r'
}
