// This file holds the graph and its stages: declaration, validation and the
// run loop with first-error cancellation. Edges and ports live in edge.go,
// tracing in recorder.go.

package graph

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
)

var (
	// ErrConsumerGone is returned by Out.Send when the consuming stage has
	// returned. A stage that returns an error matching ErrConsumerGone ends
	// normally: its consumer left and there is nobody to produce for.
	ErrConsumerGone = errors.New("graph: consumer has returned")

	// ErrPanic matches the error Run returns when a stage panicked.
	ErrPanic = errors.New("graph: panic")
)

// Graph is a set of stages joined by edges. Declare stages with Stage, join
// them with Connect, give each a function with Stage.Do, then Run it once.
// A Graph is not safe for concurrent declaration.
type Graph struct {
	rec    *Recorder
	stages []*Stage
	names  map[string]bool
	errs   []error // declaration errors, reported by Run
	ran    bool

	queues *queueWatch // queue sampling while recording (trace_queues.go)

	// set by Run
	cancel   context.CancelCauseFunc
	failOnce sync.Once
	err      error
}

// New returns an empty graph. rec may be nil, which turns recording off.
func New(rec *Recorder) *Graph {
	return &Graph{rec: rec, names: make(map[string]bool)}
}

// Stage is a named node of the graph. Its ports are made by Connect and its
// work is the function given to Do.
type Stage struct {
	g    *Graph
	name string
	fn   func(ctx context.Context) error
	outs []port // edges this stage produces into
	ins  []port // edges this stage consumes from
	rec  *stageRec
}

// port is the type-erased side of an edge the runtime closes.
type port interface {
	close()
}

// Stage declares a stage named name. Names must be unique and non-empty
// (Run reports a violation).
func (g *Graph) Stage(name string) *Stage {
	switch {
	case name == "":
		g.errs = append(g.errs, errors.New("graph: stage with empty name"))
	case g.names[name]:
		g.errs = append(g.errs, fmt.Errorf("graph: duplicate stage name %q", name))
	}
	g.names[name] = true
	s := &Stage{g: g, name: name}
	g.stages = append(g.stages, s)
	return s
}

// Name returns the stage's name.
func (s *Stage) Name() string { return s.name }

// Do sets the stage's work. fn runs in its own goroutine when the graph runs;
// ctx is cancelled when any stage fails or the caller of Run aborts. When fn
// returns, the stage's outputs and inputs are closed.
func (s *Stage) Do(fn func(ctx context.Context) error) {
	if s.fn != nil {
		s.g.errs = append(s.g.errs, fmt.Errorf("graph: stage %q: Do called twice", s.name))
	}
	s.fn = fn
}

// Run runs every stage in its own goroutine and waits until all have
// returned. It returns nil when every stage returned nil (or ErrConsumerGone), and
// otherwise the first stage error, wrapped with the stage's name. Cancelling
// ctx aborts the graph. A graph runs at most once.
func (g *Graph) Run(ctx context.Context) error {
	if err := g.validate(); err != nil {
		return err
	}
	g.ran = true

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	g.cancel = cancel

	on := g.rec.Enabled()
	for _, s := range g.stages {
		if on {
			s.rec = g.rec.register(s.name)
		}
	}
	if on {
		defer g.watchQueues()()
	}
	var wg sync.WaitGroup
	for _, s := range g.stages {
		wg.Go(func() { s.run(ctx) })
	}
	wg.Wait()
	return g.err
}

func (g *Graph) validate() error {
	if g.ran {
		return errors.New("graph: Run called twice")
	}
	errs := g.errs
	if len(g.stages) == 0 {
		errs = append(errs, errors.New("graph: no stages"))
	}
	for _, s := range g.stages {
		if s.fn == nil {
			errs = append(errs, fmt.Errorf("graph: stage %q: no function (call Do)", s.name))
		}
	}
	return errors.Join(errs...)
}

// fail records the first error and cancels every stage.
func (g *Graph) fail(err error) {
	g.failOnce.Do(func() {
		g.err = err
		g.cancel(err)
	})
}

// run calls the stage's function, turns a panic into an error, records the
// first error (cancelling the others) and only then closes the stage's ports,
// so that downstream stages see cancellation, not a clean end of input.
func (s *Stage) run(ctx context.Context) {
	if s.rec != nil {
		s.rec.start()
	}
	// Deferred so that the ports close even if fn calls runtime.Goexit.
	defer func() {
		for _, p := range s.outs {
			p.close()
		}
		for _, p := range s.ins {
			p.close()
		}
		if s.rec != nil {
			s.rec.stop()
		}
	}()
	err := s.call(ctx)
	if err != nil && (errors.Is(err, ErrPanic) || !errors.Is(err, ErrConsumerGone)) {
		s.g.fail(fmt.Errorf("graph: stage %q: %w", s.name, err))
	}
}

func (s *Stage) call(ctx context.Context) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if e, ok := r.(error); ok {
				err = fmt.Errorf("%w: %w\n%s", ErrPanic, e, debug.Stack())
			} else {
				err = fmt.Errorf("%w: %v\n%s", ErrPanic, r, debug.Stack())
			}
		}
	}()
	return s.fn(ctx)
}
