//go:build unix

// This file holds the advisory lock that keeps two processes from writing
// the same partial file.

package hub

import (
	"os"
	"syscall"
)

// lockFile takes an exclusive advisory lock on f without waiting; the lock
// goes away when f is closed or the process exits.
func lockFile(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}
