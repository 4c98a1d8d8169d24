package model

// experts.go: where a MoE layer's routed experts come from. By default they
// are views of the file mapping (Layer.GateExps ...). A weight path that
// streams experts from disk (stages' expert cache) implements Experts and
// is installed as Hooks.Experts: the forward pass then asks for the
// experts its router chose and computes each as soon as its weights are
// ready.

// ExpertWeights are one expert's three matrices.
type ExpertWeights struct {
	Gate, Up, Down Weight
}

// Matrices returns pointers to the expert's gate, up and down matrices
// (ExpertNames order).
func (e *ExpertWeights) Matrices() [3]*Weight { return [3]*Weight{&e.Gate, &e.Up, &e.Down} }

// Experts supplies routed experts' weights from outside the mapping.
type Experts interface {
	// MaxFetch is the most experts one Fetch may ask for (what the cache
	// can hold at once).
	MaxFetch() int
	// Fetch asks for experts ids (distinct, at most MaxFetch) of layer il
	// and returns without waiting: cached ones are ready, missing ones
	// are read.
	Fetch(il int, ids []int) error
	// Next waits for one fetched expert that Next has not yet returned
	// and returns its id and weights: ready ones first, the others as
	// their reads complete. The weights stay valid until Release.
	Next() (id int, w *ExpertWeights, err error)
	// Release ends the use of the experts fetched for layer il.
	Release(il int)
}

// Prefetcher is implemented by Experts that can read experts ahead of the
// router: a guess, so nothing is pinned and a wrong one only costs a read.
type Prefetcher interface {
	// Prefetch starts reading the experts ids of layer il that are not
	// cached, and returns without waiting.
	Prefetch(il int, ids []int) error
}

// Packer is implemented by backends that multiply some weight types in a
// packed layout of their own: a weight read from disk can then be packed
// before compute needs it (off compute's path), into a buffer the caller
// owns, and marked Weight.Packed.
type Packer interface {
	// PackedSize returns the size of w's packed form, 0 if w has none.
	PackedSize(w *Weight) int
	// PackInto writes w's packed form (w in the file layout) to
	// dst[:PackedSize(w)].
	PackInto(dst []byte, w *Weight) error
}

// LayerSource supplies layers' weights from outside the mapping: a weight
// path that streams layers which do not fit in RAM (stages' layer
// streaming) reads them ahead and hands each out while it runs.
type LayerSource interface {
	// Acquire waits until layer il's weights are in RAM and returns the
	// layer (norms, routers and routed experts as in Model.Layers; the
	// streamed matrices in the source's memory), valid until Release.
	Acquire(il int) (*Layer, error)
	// Release ends the use of layer il's weights.
	Release(il int)
}
