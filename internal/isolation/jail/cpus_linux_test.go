package jail

import (
	"slices"
	"testing"
)

func TestCPUSetsSpread(t *testing.T) {
	s := &cpuSets{cpus: []int{0, 1, 2, 3}, used: map[int]int{}}
	steps := []struct {
		n    int
		want []int
	}{
		{1, []int{0}},
		{2, []int{1, 2}},
		{2, []int{0, 3}}, // 3 is free; of the used ones 0 comes first
		{4, nil},         // every CPU: no pinning, nothing counted
		{1, []int{1}},
	}
	var taken [][]int
	for i, st := range steps {
		got := s.take(st.n)
		if !slices.Equal(got, st.want) {
			t.Fatalf("step %d: take(%d) = %v, want %v", i, st.n, got, st.want)
		}
		taken = append(taken, got)
	}
	for _, set := range taken {
		s.release(set)
	}
	if len(s.used) != 0 {
		t.Errorf("after releasing everything: used = %v", s.used)
	}
	s.reserve([]int{0, 1})
	if got := s.take(2); !slices.Equal(got, []int{2, 3}) {
		t.Errorf("take(2) beside an adopted sandbox on 0,1 = %v, want [2 3]", got)
	}
}
