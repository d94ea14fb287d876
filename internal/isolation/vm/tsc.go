package vm

import (
	"runtime"
	"slices"
	"time"
)

// A TCG guest's TSC is the host's, read through: it ticks at the host
// TSC's rate, which the guest kernel must be told (tsc_early_khz; its own
// calibration hangs when several guests boot at once on a loaded host),
// or its clock runs fast or slow by the ratio (measured: 1.3× with 2 GHz
// told on a 2.6 GHz host).

// hostTSCKHz measures the host TSC's rate, rounded to whole MHz so that
// it is the same from one server start to the next (it names memory
// snapshots); 0 where it cannot be read (not amd64).
func hostTSCKHz() int {
	if runtime.GOARCH != "amd64" {
		return 0
	}
	var rates []float64
	for range 3 {
		t0, c0 := time.Now(), rdtsc()
		time.Sleep(50 * time.Millisecond)
		c1, t1 := rdtsc(), time.Now()
		rates = append(rates, float64(c1-c0)/t1.Sub(t0).Seconds())
	}
	slices.Sort(rates)
	mhz := int(rates[1]/1e6 + 0.5)
	return mhz * 1000
}
