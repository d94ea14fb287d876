// Package bytesize reads and writes byte counts in the binary units the
// server's flags take, so that a default printed in --help is a value the
// flag accepts: "512MiB", "4GiB", "1.5GiB", "100B".
package bytesize

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// units are the suffixes, each 1024 times the one before.
var units = []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}

// Format writes n in the largest unit that keeps it at least 1, with at
// most one decimal.
func Format(n uint64) string {
	v, i := float64(n), 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64) + units[i]
}

// Parse reads a count: a number (decimals allowed) and one of B, KiB,
// MiB, GiB, TiB, PiB (or K, M, G, T, P); a bare number is bytes.
func Parse(s string) (uint64, error) {
	num := strings.TrimRight(s, "BKMGTPIbkmgtpi")
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("size %q: want a number of bytes with a unit, e.g. 512MiB or 4GiB", s)
	}
	withI := strings.TrimSuffix(strings.ToUpper(s[len(num):]), "B") // "", "K", "KI", …
	unit := strings.TrimSuffix(withI, "I")
	mult := 1.0
	switch {
	case withI == "":
	case len(unit) == 1 && strings.Contains("KMGTP", unit):
		mult = math.Pow(1024, float64(strings.Index("KMGTP", unit)+1))
	default:
		return 0, fmt.Errorf("size %q: unknown unit; use B, KiB, MiB, GiB, TiB or PiB", s)
	}
	b := v * mult
	if b >= math.MaxUint64 {
		return 0, errors.New("size " + strconv.Quote(s) + " is too large")
	}
	return uint64(b), nil
}
