// This file holds the sampler's random number generator: a 32-bit Mersenne
// Twister (MT19937) and the uniform double draw built on it, bit-compatible
// with C++'s std::mt19937 and libstdc++'s
// std::uniform_real_distribution<double>(0, 1), which is what llama.cpp's
// dist sampler uses. With the same 32-bit seed and the same candidate list,
// a draw here picks the same token as llama.cpp.
//
// It is not a general-purpose or cryptographic generator.

package sample

import "math"

const (
	mtN         = 624
	mtM         = 397
	mtMatrixA   = 0x9908b0df
	mtUpperMask = 0x80000000
	mtLowerMask = 0x7fffffff
)

// mt19937 is the state of a 32-bit Mersenne Twister (2496 bytes).
type mt19937 struct {
	mt [mtN]uint32
	i  int // next index into mt; mtN means "twist before the next output"
}

// seed initialises the state as std::mt19937(s) and mt19937ar's init_genrand.
func (m *mt19937) seed(s uint32) {
	m.mt[0] = s
	for i := 1; i < mtN; i++ {
		prev := m.mt[i-1]
		m.mt[i] = 1812433253*(prev^(prev>>30)) + uint32(i)
	}
	m.i = mtN
}

// seedArray initialises the state from a key as mt19937ar's init_by_array;
// used for seeds that do not fit in 32 bits.
func (m *mt19937) seedArray(key []uint32) {
	m.seed(19650218)
	i, j := 1, 0
	for k := max(mtN, len(key)); k > 0; k-- {
		prev := m.mt[i-1]
		m.mt[i] = (m.mt[i] ^ ((prev ^ (prev >> 30)) * 1664525)) + key[j] + uint32(j)
		i++
		j++
		if i >= mtN {
			m.mt[0] = m.mt[mtN-1]
			i = 1
		}
		if j >= len(key) {
			j = 0
		}
	}
	for k := mtN - 1; k > 0; k-- {
		prev := m.mt[i-1]
		m.mt[i] = (m.mt[i] ^ ((prev ^ (prev >> 30)) * 1566083941)) - uint32(i)
		i++
		if i >= mtN {
			m.mt[0] = m.mt[mtN-1]
			i = 1
		}
	}
	m.mt[0] = 0x80000000 // the state is never all zero
	m.i = mtN
}

// twist regenerates the whole state block.
func (m *mt19937) twist() {
	for i := range mtN {
		y := (m.mt[i] & mtUpperMask) | (m.mt[(i+1)%mtN] & mtLowerMask)
		v := m.mt[(i+mtM)%mtN] ^ (y >> 1)
		if y&1 != 0 {
			v ^= mtMatrixA
		}
		m.mt[i] = v
	}
	m.i = 0
}

// uint32 returns the next tempered output.
func (m *mt19937) uint32() uint32 {
	if m.i >= mtN {
		m.twist()
	}
	y := m.mt[m.i]
	m.i++
	y ^= y >> 11
	y ^= (y << 7) & 0x9d2c5680
	y ^= (y << 15) & 0xefc60000
	y ^= y >> 18
	return y
}

// float64 returns a uniform value in [0, 1) exactly as libstdc++'s
// generate_canonical<double, 53> over std::mt19937 does: two outputs, the
// first as the low word, combined in double arithmetic and divided by 2^64.
func (m *mt19937) float64() float64 {
	lo := float64(m.uint32())
	hi := float64(m.uint32())
	r := (lo + hi*4294967296.0) / 18446744073709551616.0
	if r >= 1 {
		r = math.Nextafter(1, 0)
	}
	return r
}
