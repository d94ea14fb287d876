package cgroup

import (
	"bytes"
	"fmt"
	"strconv"
)

// v1Unlimited is the smallest value a v1 limit file shows for "no limit"
// (the kernel prints PAGE_COUNTER_MAX pages, just under 2^63 bytes).
const v1Unlimited = 1 << 62

// parseKeyed parses a flat-keyed cgroup file, one "key value" pair a line:
// memory.stat, cpu.stat, memory.events, cgroup.events, memory.oom_control.
func parseKeyed(data []byte) (map[string]uint64, error) {
	out := make(map[string]uint64)
	for i, line := range bytes.Split(data, []byte("\n")) {
		fields := bytes.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if len(fields) != 2 {
			return nil, fmt.Errorf("line %d: want \"key value\", got %q", i+1, line)
		}
		v, err := strconv.ParseUint(string(fields[1]), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		out[string(fields[0])] = v
	}
	return out, nil
}

// parseValue parses a single-value cgroup file such as memory.current or
// pids.max. "max" (no limit) reads as 0.
func parseValue(data []byte) (uint64, error) {
	s := string(bytes.TrimSpace(data))
	if s == "max" {
		return 0, nil
	}
	return strconv.ParseUint(s, 10, 64)
}

// v1Limit maps a v1 limit value to the package's convention: 0 for none.
func v1Limit(v uint64) uint64 {
	if v >= v1Unlimited {
		return 0
	}
	return v
}

// parseFreezerState parses v1's freezer.state.
func parseFreezerState(data []byte) (string, error) {
	switch s := string(bytes.TrimSpace(data)); s {
	case frozen, freezing, thawed:
		return s, nil
	default:
		return "", fmt.Errorf("unknown freezer state %q", s)
	}
}
