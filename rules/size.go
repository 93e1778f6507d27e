package rules

import (
	"errors"
	"math"
	"strconv"
	"strings"
)

// Size is a number of bytes. In a config file it is a whole number with a
// binary unit, "64KiB" or "1MiB" (units B, KiB, MiB, GiB), or a plain
// integer of bytes. Decimal units (KB, MB) are refused rather than guessed:
// nginx reads "1m" as 1 MiB, and others read "1MB" as 10^6 bytes.
type Size int64

// Size units.
const (
	Byte Size = 1
	KiB       = 1024 * Byte
	MiB       = 1024 * KiB
	GiB       = 1024 * MiB
)

var sizeUnits = []struct {
	name string
	v    Size
}{{"GiB", GiB}, {"MiB", MiB}, {"KiB", KiB}, {"B", Byte}}

// errSize says how to write a size; ParseSize returns it for anything else.
var errSize = errors.New("must be a size such as 64KiB or 1MiB (units B, KiB, MiB, GiB) or a whole number of bytes")

// ParseSize parses a size: digits, optionally followed by one of the units
// B, KiB, MiB or GiB ("1MiB", "512B", "65536"). A space may separate the
// number from its unit. It refuses fractions, signs, decimal units and
// values that overflow an int64.
func ParseSize(s string) (Size, error) {
	num, unit := s, Byte
	for _, u := range sizeUnits {
		if n, ok := strings.CutSuffix(s, u.name); ok {
			num, unit = strings.TrimSuffix(n, " "), u.v
			break
		}
	}
	if num == "" || strings.TrimLeft(num, "0123456789") != "" {
		return 0, errSize
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n > math.MaxInt64/int64(unit) {
		return 0, errors.New("is too large for a size")
	}
	return Size(n) * unit, nil
}

// String returns the size in the largest unit that holds it exactly:
// "1MiB", "1536KiB", "100B". It parses back with ParseSize.
func (s Size) String() string {
	for _, u := range sizeUnits {
		if s != 0 && s%u.v == 0 {
			return strconv.FormatInt(int64(s/u.v), 10) + u.name
		}
	}
	return strconv.FormatInt(int64(s), 10) + "B"
}
