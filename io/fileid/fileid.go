// Package fileid tells whether a file is still the one that was opened: its
// identity is the device and inode, the size, the modification time and
// the status-change time (ctime). A rewrite in place changes the ctime even
// when the writer restores the modification time (touch -r) and the size;
// a replacement (rename over the path) changes the inode of the path.
//
// Linux updates the ctime before a write's bytes land (file_modified
// precedes the copy), so a reader that checks the identity after reading
// keeps no byte of a write it did not see. What it cannot see: a write of
// the same size within the same tick of a coarse timestamp clock as the
// stat that took the identity; kernels with multigrain timestamps (6.13+,
// on the filesystems that support them) give a change after a stat a
// finer ctime, which closes that gap.
package fileid

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ErrChanged is matched (errors.Is) by Check's error.
var ErrChanged = errors.New("file changed since it was opened")

// ID is a file's identity at one moment.
type ID struct {
	Dev, Ino     uint64
	Size         int64
	Mtime, Ctime time.Time
}

func fromStat(st *unix.Stat_t) ID {
	return ID{Dev: st.Dev, Ino: st.Ino, Size: st.Size,
		Mtime: time.Unix(st.Mtim.Unix()), Ctime: time.Unix(st.Ctim.Unix())}
}

// Of returns the identity of the open file f (fstat).
func Of(f *os.File) (ID, error) { return OfFd(int(f.Fd())) }

// OfFd returns the identity of the open descriptor fd (fstat).
func OfFd(fd int) (ID, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return ID{}, err
	}
	return fromStat(&st), nil
}

// Path returns the identity of the file at path (stat, following links).
func Path(path string) (ID, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return ID{}, err
	}
	return fromStat(&st), nil
}

// Check returns nil when now is the identity id was taken from, else an
// error matching ErrChanged that says what changed (only what did).
func (id ID) Check(now ID) error {
	var what []string
	if now.Dev != id.Dev || now.Ino != id.Ino {
		what = append(what, fmt.Sprintf("inode %d:%d, was %d:%d (another file at the path)", now.Dev, now.Ino, id.Dev, id.Ino))
	}
	if now.Size != id.Size {
		what = append(what, fmt.Sprintf("size %d, was %d", now.Size, id.Size))
	}
	if !now.Mtime.Equal(id.Mtime) {
		what = append(what, fmt.Sprintf("modified %s, was %s", stamp(now.Mtime), stamp(id.Mtime)))
	}
	if !now.Ctime.Equal(id.Ctime) {
		what = append(what, fmt.Sprintf("status changed %s, was %s", stamp(now.Ctime), stamp(id.Ctime)))
	}
	if len(what) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrChanged, strings.Join(what, "; "))
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000000Z") }
