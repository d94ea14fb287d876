// Package cgroup puts every sandbox in its own control group, on cgroup v1 and
// v2 hosts alike, and gives the jail backend and the lifecycle manager what
// they need from it: limits, membership, freeze/thaw (pause), statistics, OOM
// kill counts, kill-everything, delete, and Load to adopt a group after a
// server restart.
//
// # Layouts
//
// Detect tells the three layouts apart by the filesystem mounted at Root:
//
//   - V2 (unified): one cgroup2 hierarchy at Root. A group is one directory.
//     Create enables the cpu, memory, pids and io controllers in
//     cgroup.subtree_control of every ancestor (the per-server parent must
//     therefore hold no processes itself, as cgroup v2 requires), and cpuset
//     when the limits pin CPUs, then writes cpu.max, memory.max,
//     memory.swap.max=0, pids.max and cpuset.cpus. LimitIO writes io.max.
//   - V1 (legacy): one hierarchy per controller under Root. A group is one
//     directory in each of the freezer, pids, memory, cpuacct and cpu
//     hierarchies, plus cpuset and blkio when they are mounted (cpuset's cpus
//     and mems are copied from the parent, as the kernel leaves them empty;
//     LimitIO writes blkio's throttle files, which only hold direct and
//     synchronous writes: v1 charges buffered writeback to no group). The memory limit is
//     written to memory.limit_in_bytes and, when the kernel accounts swap, the
//     same value to memory.memsw.limit_in_bytes so that the sandbox cannot
//     swap; without swap accounting memory.swappiness is set to 0 instead.
//   - Hybrid: systemd's layout, controllers on v1 hierarchies under Root and a
//     controller-less cgroup2 at Root/unified. Groups are made on the v1 side,
//     exactly as for V1; the v2 tree is left to systemd.
//
// Names are relative to the root of the hierarchy (not to the server's own
// cgroup), e.g. "agent-sandbox/<sandboxID>", so that a restarted server finds
// its groups where it left them. The first path element is the per-server
// parent; it is created on demand and never deleted by this package.
//
// Creating directories, enabling controllers and writing limits is left to
// github.com/containerd/cgroups/v3. Freezing, killing, statistics and removal
// are done here on the cgroup files directly, because they must honour a
// context and wait for the state the kernel reports (v1 freezer.state; v2
// cgroup.events "frozen 1" and "populated 0"), which the library does not.
//
// # Passing a group to a child
//
// On V2 the jail starts its init directly inside the group: OpenDir returns
// the group's directory, whose descriptor goes into
// syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd} (clone3 with
// CLONE_INTO_CGROUP). The child never runs outside the group, and a
// CLONE_NEWCGROUP in the same clone roots its cgroup namespace at the group.
//
// On V1 and Hybrid there is no CLONE_INTO_CGROUP: the jail starts its init
// blocked on a pipe, calls Add with the child's pid, and only then lets it
// continue. The init must unshare CLONE_NEWCGROUP after that point, not at
// clone time, or its cgroup namespace would be rooted at the server's groups.
// Dirs lists the group's directory in every hierarchy for an init that wants
// to join by writing its own pid to each cgroup.procs.
package cgroup
