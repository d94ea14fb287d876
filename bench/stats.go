package bench

import (
	"math"
	"slices"
	"time"
)

// Latency is a set of duration samples.
type Latency struct {
	Samples []time.Duration `json:"-"`
}

// add records one sample.
func (l *Latency) add(d time.Duration) { l.Samples = append(l.Samples, d) }

// Quantile returns the q-quantile (0..1) by the nearest-rank method; 0
// without samples.
func (l Latency) Quantile(q float64) time.Duration {
	if len(l.Samples) == 0 {
		return 0
	}
	s := slices.Clone(l.Samples)
	slices.Sort(s)
	rank := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(rank, 0), len(s)-1)]
}

// Mean is the arithmetic mean.
func (l Latency) Mean() time.Duration {
	if len(l.Samples) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range l.Samples {
		sum += d
	}
	return sum / time.Duration(len(l.Samples))
}

// ms converts to float milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Bin is one histogram bucket: samples in [Lo, Hi) milliseconds.
type Bin struct {
	Lo, Hi float64
	Count  int
}

// histogram buckets the samples on a log scale, so that a fast mode and a
// slow tail both show: bins edges at 10^(k/per), per bins per decade.
func (l Latency) histogram(per int) []Bin {
	if len(l.Samples) == 0 {
		return nil
	}
	lo, hi := math.Inf(1), 0.0
	for _, d := range l.Samples {
		v := math.Max(ms(d), 1e-3)
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	k0 := int(math.Floor(math.Log10(lo) * float64(per)))
	k1 := int(math.Floor(math.Log10(hi)*float64(per))) + 1
	bins := make([]Bin, k1-k0)
	for i := range bins {
		bins[i].Lo = math.Pow(10, float64(k0+i)/float64(per))
		bins[i].Hi = math.Pow(10, float64(k0+i+1)/float64(per))
	}
	for _, d := range l.Samples {
		v := math.Max(ms(d), 1e-3)
		i := int(math.Floor(math.Log10(v)*float64(per))) - k0
		bins[min(max(i, 0), len(bins)-1)].Count++
	}
	return bins
}

// mbps is size bytes in d, in MB (10^6 bytes) per second.
func mbps(size int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(size) / 1e6 / d.Seconds()
}
