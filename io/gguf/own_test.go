package gguf

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
	"time"

	"github.com/flowinfer/flowinfer/io/fileid"
)

// copyGolden copies a golden model into a temporary file the test may
// truncate, and returns its path and bytes.
func copyGolden(t *testing.T, name string) (string, []byte) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(goldenDir(t, "models"), name))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p, data
}

// readGuarded copies b, reporting a fault (a page of a truncated file) as
// an error rather than dying of it.
func readGuarded(b []byte) (out []byte, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = errors.New("fault")
		}
	}()
	return bytes.Clone(b), nil
}

// Owned tensors keep their bytes (and addresses) when the file is
// truncated under the mapping; a tensor left mapped faults, which is what
// Own is for.
func TestOwnSurvivesTruncation(t *testing.T) {
	p, data := copyGolden(t, "synth-qwen3moe-Q8_0.gguf")
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, ok := f.ID(); !ok {
		t.Fatal("no identity for an opened file")
	}
	last := f.Tensors[len(f.Tensors)-1]
	var kept, left []*Tensor
	var rs []Range
	for _, tn := range f.Tensors {
		if tn.Size == 0 {
			continue
		}
		if tn == last || len(kept) > len(f.Tensors)/2 {
			left = append(left, tn)
			continue
		}
		kept = append(kept, tn)
		rs = append(rs, Range{int64(f.DataOffset + tn.Offset), int64(tn.Size)})
	}
	addrs := make([]*byte, len(kept))
	for i, tn := range kept {
		addrs[i] = &tn.Data[0]
	}
	n, err := f.Own(rs)
	if err != nil {
		t.Fatal(err)
	}
	if n <= 0 || n%4096 != 0 {
		t.Errorf("owned %d bytes, want whole pages", n)
	}
	if err := os.Truncate(p, int64(f.DataOffset)); err != nil {
		t.Fatal(err)
	}
	for i, tn := range kept {
		got, err := readGuarded(tn.Data)
		if err != nil {
			t.Fatalf("owned tensor %s: %v", tn.Name, err)
		}
		off := f.DataOffset + tn.Offset
		if !bytes.Equal(got, data[off:off+tn.Size]) || &tn.Data[0] != addrs[i] {
			t.Fatalf("owned tensor %s: bytes or address changed", tn.Name)
		}
	}
	// the last tensor's last page is not shared with an owned one
	if _, err := readGuarded(last.Data[len(last.Data)-1:]); err == nil {
		t.Errorf("a mapped page past the end of the truncated file read without a fault: the test proves nothing")
	}
	// Own now refuses: the file is not the one opened
	if _, err := f.Own(rs[:1]); !errors.Is(err, fileid.ErrChanged) {
		t.Errorf("Own after truncation: %v, want ErrChanged", err)
	}
}

// A file rewritten between Open and Own (same size, modification time
// restored) is refused.
func TestOwnChangedFile(t *testing.T) {
	p, data := copyGolden(t, "synth-qwen3moe-Q8_0.gguf")
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := os.Stat(p)
	time.Sleep(20 * time.Millisecond)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(p, st.ModTime(), st.ModTime())
	tn := f.Tensors[0]
	if _, err := f.Own([]Range{{int64(f.DataOffset + tn.Offset), int64(tn.Size)}}); !errors.Is(err, fileid.ErrChanged) {
		t.Errorf("Own of a rewritten file: %v, want ErrChanged", err)
	}
	if _, err := Parse(data); err != nil {
		t.Fatal(err)
	}
	pf, _ := Parse(data)
	if _, err := pf.Own(nil); err == nil {
		t.Error("Own of a parsed (unmapped) file succeeded")
	}
}
