//go:build cgo

package vk

import "testing"

// TestCloseDestroysChildren: Close destroys what its owner left alive
// (Vulkan forbids destroying a device with live children; the validation
// layer reports it), and a later Free or Destroy is harmless.
func TestCloseDestroysChildren(t *testing.T) {
	d := openTestDevice(t, DeviceConfig{})
	b, err := d.NewBuffer(256, DeviceLocal)
	if err != nil {
		t.Fatal(err)
	}
	f, err := d.NewFence()
	if err != nil {
		t.Fatal(err)
	}
	c, err := d.NewCommandBuffer(Compute)
	if err != nil {
		t.Fatal(err)
	}
	q, err := d.NewQueryPool(1)
	if err != nil {
		t.Fatal(err)
	}
	freed, err := d.NewBuffer(64, Upload)
	if err != nil {
		t.Fatal(err)
	}
	freed.Free()
	if n := len(d.live); n != 4 {
		t.Fatalf("%d live objects, want 4", n)
	}
	d.Close()
	if b.h != 0 || f.h != 0 || c.h != nil || q.h != 0 {
		t.Fatalf("Close left objects alive: buffer %v fence %v cmd %v queries %v", b.h, f.h, c.h, q.h)
	}
	b.Free()
	f.Destroy()
	c.Free()
	q.Destroy()
}
