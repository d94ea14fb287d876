//go:build !amd64

package vm

// rdtsc is amd64's alone; hostTSCKHz does not call it elsewhere.
func rdtsc() uint64 { return 0 }
