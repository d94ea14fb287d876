package jail

import (
	"slices"
	"testing"
)

func TestV1Hierarchies(t *testing.T) {
	const procCgroups = `#subsys_name	hierarchy	num_cgroups	enabled
cpuset	3	5	1
cpu	1	5	1
cpuacct	1	5	1
blkio	7	1	1
memory	4	76	1
devices	5	1	1
net_cls	8	1	1
net_prio	8	1	1
hugetlb	0	1	1
pids	9	5	1
rdma	10	1	0
`
	got := v1Hierarchies([]byte(procCgroups), []string{"blkio", "cpu", "cpuacct", "cpuset", "memory", "pids", "rdma"})
	want := [][]string{{"cpuset"}, {"cpu", "cpuacct"}, {"blkio"}, {"memory"}, {"pids"}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("v1Hierarchies = %v, want %v (devices and net_cls,net_prio are not the sandbox's; rdma is disabled)", got, want)
	}
}
