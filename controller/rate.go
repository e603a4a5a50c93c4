package controller

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// MaxRate is the highest rate ParseRate accepts and bounds may name, in
// bit/s: 10 Tbit/s, above the fastest interface (1.6 Tbit/s Ethernet) by a
// wide margin, and low enough that every rate is a whole number of bit/s
// exactly in a float64 (below 2^53) and that a day of traffic at it, in
// bytes, fits an int64.
const MaxRate = 10e12

// ParseRate parses a rate such as "850kbit", "20mbit", "1.5gbit" or a plain
// number of bit/s, and returns bit/s. Units are SI (1 kbit = 1000 bit) and
// case-insensitive; "bit", "bps" and "kbps"/"mbps"/"gbps" are accepted too.
// The result is finite, from 0 to MaxRate.
func ParseRate(s string) (float64, error) {
	in := strings.ToLower(strings.TrimSpace(s))
	if in == "" {
		return 0, fmt.Errorf("empty rate")
	}
	mult := 1.0
	for _, u := range []struct {
		suffix string
		mult   float64
	}{
		{"gbit", 1e9}, {"gbps", 1e9}, {"mbit", 1e6}, {"mbps", 1e6},
		{"kbit", 1e3}, {"kbps", 1e3}, {"bit", 1}, {"bps", 1},
	} {
		if strings.HasSuffix(in, u.suffix) {
			in = strings.TrimSpace(strings.TrimSuffix(in, u.suffix))
			mult = u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(in, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("invalid rate %q: want a number with an optional unit (kbit, mbit, gbit)", s)
	}
	if v < 0 {
		return 0, fmt.Errorf("invalid rate %q: negative", s)
	}
	// The product, not the number, is checked: "1e300gbit" overflows to
	// +Inf only here.
	bps := v * mult
	if !(bps <= MaxRate) {
		return 0, fmt.Errorf("invalid rate %q: above 10 Tbit/s (%s), faster than any link", s, FormatRate(MaxRate))
	}
	// "-0" parses as negative zero, which prints as "-0".
	return math.Abs(bps), nil
}

// FormatRate prints bit/s with the largest unit that keeps the number at or
// above 1, e.g. "20mbit", "850kbit", "1.5gbit".
func FormatRate(bps float64) string {
	switch {
	case bps >= 1e9:
		return strconv.FormatFloat(bps/1e9, 'f', -1, 64) + "gbit"
	case bps >= 1e6:
		return strconv.FormatFloat(bps/1e6, 'f', -1, 64) + "mbit"
	case bps >= 1e3:
		return strconv.FormatFloat(bps/1e3, 'f', -1, 64) + "kbit"
	}
	return strconv.FormatFloat(bps, 'f', -1, 64) + "bit"
}
