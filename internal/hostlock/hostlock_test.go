package hostlock

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestAcquire(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "network.lock")
	release, err := Acquire(path, "first", false)
	if err != nil {
		t.Fatal(err)
	}
	// flock locks belong to the open file, so a second open in this
	// process is refused like another process would be.
	_, err = Acquire(path, "second", false)
	if !errors.Is(err, ErrHeld) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())+" (first)") {
		t.Fatalf("second Acquire = %v, want ErrHeld naming the first holder", err)
	}

	got := make(chan error, 1)
	go func() {
		r, err := Acquire(path, "waiter", true)
		if err == nil {
			r()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("a waiting Acquire returned %v while the lock was held", err)
	case <-time.After(100 * time.Millisecond):
	}
	release()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiting Acquire: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a waiting Acquire did not get the lock after its release")
	}
	r, err := Acquire(path, "third", false)
	if err != nil {
		t.Fatalf("Acquire after both released: %v", err)
	}
	r()
}
