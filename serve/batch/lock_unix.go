//go:build unix

// This file holds the advisory lock that keeps two batch runs from
// appending to the same output.

package batch

import (
	"errors"
	"os"
	"syscall"
)

// lockFile takes an exclusive advisory lock on f without waiting (flock(2);
// it goes away when f is closed or the process exits). busy is true when
// another open file holds it.
func lockFile(f *os.File) (busy bool, err error) {
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	return errors.Is(err, syscall.EWOULDBLOCK), err
}
