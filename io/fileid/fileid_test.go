package fileid

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Each way of changing a file is seen, and the error names only what
// changed: a rewrite with the same size and a restored modification time
// is caught by the ctime; a replacement by the inode.
func TestCheck(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("abcdef"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	id, err := Of(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := id.Check(id); err != nil {
		t.Fatalf("unchanged: %v", err)
	}
	if pid, err := Path(p); err != nil || id.Check(pid) != nil {
		t.Fatalf("Path and Of disagree: %v %v", err, id.Check(pid))
	}
	// let the kernel's coarse clock tick, so the new ctime differs
	time.Sleep(20 * time.Millisecond)

	// same size, modification time restored: only the ctime differs
	if err := os.WriteFile(p, []byte("ABCDEF"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	now, _ := Of(f)
	err = id.Check(now)
	if !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), "status changed") ||
		strings.Contains(err.Error(), "size") || strings.Contains(err.Error(), "modified") || strings.Contains(err.Error(), "inode") {
		t.Errorf("rewrite with the modification time restored: %v", err)
	}

	// truncated: size, modification and status change
	if err := os.Truncate(p, 2); err != nil {
		t.Fatal(err)
	}
	now, _ = Of(f)
	if err := id.Check(now); !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), "size 2, was 6") {
		t.Errorf("truncated: %v", err)
	}

	// replaced by rename: the path names another inode, the open file is
	// untouched
	q := filepath.Join(dir, "g")
	if err := os.WriteFile(q, []byte("abcdef"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(q, p); err != nil {
		t.Fatal(err)
	}
	pid, _ := Path(p)
	if err := id.Check(pid); !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), "inode") {
		t.Errorf("replaced: %v", err)
	}
}
