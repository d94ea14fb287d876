package network

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func TestNamespace(t *testing.T) {
	testenv.RequireRoot(t)
	runDir := t.TempDir()
	t.Cleanup(func() { _ = unix.Unmount(Dir(runDir), unix.MNT_DETACH) })
	ns, err := Create(runDir, "t1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ns.Delete() })

	if _, err := Create(runDir, "t1"); !errors.Is(err, fs.ErrExist) {
		t.Errorf("Create of a name in use: got %v, want ErrExist", err)
	}

	// Inside: only lo, and it is up.
	var links []string
	if err := ns.Do(func() error {
		ls, err := netlink.LinkList()
		for _, l := range ls {
			if l.Attrs().Flags&net.FlagUp == 0 {
				t.Errorf("link %s is down", l.Attrs().Name)
			}
			links = append(links, l.Attrs().Name)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(links, []string{"lo"}) {
		t.Errorf("links in namespace = %v, want [lo]", links)
	}

	// A listener on the namespace's loopback answers through Dial and is
	// not reachable from the host's loopback.
	var ln net.Listener
	if err := ns.Do(func() (err error) {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, "hello")
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := ns.Dial(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("Dial into namespace: %v", err)
	}
	b, _ := io.ReadAll(c)
	c.Close()
	if string(b) != "hello" {
		t.Errorf("read %q through Dial, want hello", b)
	}
	if c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Errorf("host loopback reached the namespace's listener at %s", ln.Addr())
	}

	// Open and List find it again.
	ns2, err := Open(runDir, "t1")
	if err != nil {
		t.Fatal(err)
	}
	if names, err := List(runDir); err != nil || !slices.Equal(names, []string{"t1"}) {
		t.Errorf("List = %v, %v; want [t1]", names, err)
	}

	// Delete is idempotent and leaves no mount.
	for range 2 {
		if err := ns2.Delete(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Open(runDir, "t1"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open after Delete: %v, want ErrNotExist", err)
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mi), ns.Path()) {
		t.Errorf("mountinfo still lists %s", ns.Path())
	}
	// The calling threads are back in the host namespace.
	if _, err := netlink.LinkByName("lo"); err != nil {
		t.Error(err)
	}
}
