package proc

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestOpenWaitSignal(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	reaped := make(chan struct{})
	go func() { _ = cmd.Wait(); close(reaped) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-reaped })
	start, err := StartTime(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(cmd.Process.Pid, start+1); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open with another start time = %v, want ErrNotExist", err)
	}
	p, err := Open(cmd.Process.Pid, start)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	exited := make(chan struct{})
	go func() { p.Wait(); close(exited) }()
	select {
	case <-exited:
		t.Fatal("Wait returned while the process runs")
	case <-time.After(100 * time.Millisecond):
	}
	if err := p.Signal(unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not return after the process was killed")
	}
	if _, err := Open(os.Getpid()+1<<22, 1); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open of no process = %v, want ErrNotExist", err)
	}
}
