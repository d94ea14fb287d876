package template

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestListWhileTemplatesGo lists templates while another goroutine makes
// and deletes template directories: a template deleted between the read
// of the templates and the read of its versions is left out, never an
// error (the dashboard's list answered 404 so while a test deleted its
// templates).
func TestListWhileTemplatesGo(t *testing.T) {
	b := &Builder{DataDir: t.TempDir()}
	dir := b.templatesDir()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			name := filepath.Join(dir, "churn", "v")
			if err := os.MkdirAll(name, 0o755); err != nil {
				t.Error(err)
				return
			}
			if err := os.RemoveAll(filepath.Join(dir, "churn")); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	defer func() {
		close(stop)
		<-done
	}()
	lists := 0
	for deadline := time.Now().Add(300 * time.Millisecond); time.Now().Before(deadline); lists++ {
		if _, err := b.List(); err != nil {
			t.Fatalf("list %d while a template came and went: %v", lists, err)
		}
	}
	t.Logf("%d lists while a template came and went", lists)
}
