package vm

// rdtsc reads the host CPU's time stamp counter.
func rdtsc() uint64
