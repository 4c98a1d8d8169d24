package stages

// stage.go: what the stages of this package share.

import (
	"context"
	"errors"
	"io"

	"github.com/flowinfer/flowinfer/graph"
)

// each calls fn with every item of in until in ends (its producer
// returned: each returns nil), ctx ends or fn fails (each returns that
// error).
func each[T any](ctx context.Context, in *graph.In[T], fn func(T) error) error {
	for {
		v, err := in.Recv(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := fn(v); err != nil {
			return err
		}
	}
}

// roundUp rounds n up to a multiple of m.
func roundUp(n, m int) int { return (n + m - 1) / m * m }
