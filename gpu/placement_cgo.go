//go:build cgo

package gpu

import (
	"fmt"

	"github.com/flowinfer/flowinfer/gpu/vk"
	"github.com/flowinfer/flowinfer/model"
)

// NewBackendPlaced opens the backend on dev holding the parts of m that
// plan puts on the device (uploaded now). Close releases what it made.
func NewBackendPlaced(dev *vk.Device, m *model.Model, plan *Plan) (*Backend, error) {
	return newPlaced(dev, m, nil, plan)
}

func newPlaced(dev *vk.Device, m *model.Model, k *Kernels, plan *Plan) (*Backend, error) {
	if err := Placeable(m); err != nil {
		return nil, fmt.Errorf("%w: %w", vk.ErrUnsupported, err)
	}
	if plan == nil || len(plan.GPU) != m.NLayer {
		return nil, fmt.Errorf("gpu: a placement of %d layers for a model of %d", len(plan.GPU), m.NLayer)
	}
	if plan.NoGPU() {
		return nil, fmt.Errorf("gpu: the placement puts nothing on the GPU")
	}
	return newBackendOn(dev, m, k, plan)
}

// SplitOps returns the Ops of a step placed by plan: layers and output on
// be where plan says, on c (the CPU backend, a *cpu.Backend) elsewhere;
// the token embeddings are looked up by c when layer 0 is the CPU's, else
// by be. With everything on the device it returns be itself (no split).
func SplitOps(plan *Plan, be *Backend, c model.Ops) model.Ops {
	if plan.AllGPU() {
		return be
	}
	s := &model.Split{Input: c, Output: c, Layers: make([]model.Ops, len(plan.GPU))}
	if plan.GPU[0] {
		s.Input = be
	}
	if plan.Output {
		s.Output = be
	}
	for il, g := range plan.GPU {
		s.Layers[il] = c
		if g {
			s.Layers[il] = be
		}
	}
	return s
}
