// This file holds ByteSize, a byte count written in YAML and on the command
// line as "12GiB", "512 MiB", "8GB" or a plain number of bytes.

package configs

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ByteSize is a number of bytes. It parses binary (KiB, MiB, GiB, TiB) and
// decimal (KB, MB, GB, TB) suffixes, case-insensitively, with an optional
// space; a bare number is bytes.
type ByteSize int64

// Byte size units.
const (
	KiB ByteSize = 1 << 10
	MiB ByteSize = 1 << 20
	GiB ByteSize = 1 << 30
	TiB ByteSize = 1 << 40
)

var sizeUnits = []struct {
	suffix string
	mult   float64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40},
	{"b", 1},
}

// ParseByteSize parses s ("12GiB", "1.5 GB", "4096").
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := 1.0
	for _, u := range sizeUnits {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("configs: bad byte size %q (want e.g. 8GiB, 512MiB, 4GB or a number of bytes)", s)
	}
	b := v * mult
	if b < 0 || b > math.MaxInt64/2 {
		return 0, fmt.Errorf("configs: byte size %q out of range", s)
	}
	return ByteSize(math.Round(b)), nil
}

// String formats b in the largest binary unit it reaches: a whole number
// when exact ("12GiB"), else with two decimals ("7.45GiB").
func (b ByteSize) String() string {
	units := []struct {
		name string
		v    ByteSize
	}{{"TiB", TiB}, {"GiB", GiB}, {"MiB", MiB}, {"KiB", KiB}}
	for _, u := range units {
		switch {
		case b < u.v:
			continue
		case b%u.v == 0:
			return strconv.FormatInt(int64(b/u.v), 10) + u.name
		default:
			return strconv.FormatFloat(float64(b)/float64(u.v), 'f', 2, 64) + u.name
		}
	}
	return strconv.FormatInt(int64(b), 10)
}

// UnmarshalYAML accepts a number of bytes or a string with a unit.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a byte size such as 8GiB", n.Line)
	}
	v, err := ParseByteSize(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*b = v
	return nil
}

// exact is b in the largest unit that divides it, else in bytes: unlike
// String (rounded to two decimals for display), it parses back to b.
func (b ByteSize) exact() string {
	for _, u := range []struct {
		name string
		v    ByteSize
	}{{"TiB", TiB}, {"GiB", GiB}, {"MiB", MiB}, {"KiB", KiB}} {
		if b >= u.v && b%u.v == 0 {
			return strconv.FormatInt(int64(b/u.v), 10) + u.name
		}
	}
	return strconv.FormatInt(int64(b), 10)
}

// MarshalYAML writes the exact form, so a written profile loads back the
// same (a rounded "1.04KiB" would not: fuzz finding, testdata/fuzz/FuzzLoad).
func (b ByteSize) MarshalYAML() (any, error) { return b.exact(), nil }

// UnmarshalText lets flags and environment variables carry byte sizes.
func (b *ByteSize) UnmarshalText(text []byte) error {
	v, err := ParseByteSize(string(text))
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// MarshalText writes the String form.
func (b ByteSize) MarshalText() ([]byte, error) { return []byte(b.exact()), nil }
