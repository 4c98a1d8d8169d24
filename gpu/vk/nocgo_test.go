//go:build !cgo

package vk

import (
	"errors"
	"testing"
)

func TestNoCgo(t *testing.T) {
	if _, err := NewInstance(Config{}); !errors.Is(err, ErrNoCgo) {
		t.Fatalf("err = %v, want ErrNoCgo", err)
	}
}
