package graph_test

import (
	"context"
	"fmt"
	"io"

	"github.com/flowinfer/flowinfer/graph"
)

// A source -> map -> sink pipeline: the source drains by returning, end of
// input flows down, and Run returns once every stage has finished.
func Example() {
	g := graph.New(nil) // pass graph.NewRecorder(0) to trace it
	src, sq, sink := g.Stage("source"), g.Stage("square"), g.Stage("sink")
	srcOut, sqIn := graph.Connect[int](src, sq, 64)
	sqOut, sinkIn := graph.Connect[int](sq, sink, 64)

	src.Do(func(ctx context.Context) error {
		for i := 1; i <= 5; i++ {
			if err := srcOut.Send(ctx, i); err != nil {
				return err
			}
		}
		return nil // closes srcOut: square sees io.EOF after the last item
	})
	sq.Do(func(ctx context.Context) error {
		for {
			v, err := sqIn.Recv(ctx)
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			if err := sqOut.Send(ctx, v*v); err != nil {
				return err
			}
		}
	})
	sink.Do(func(ctx context.Context) error {
		for {
			v, err := sinkIn.Recv(ctx)
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			fmt.Println(v)
		}
	})

	if err := g.Run(context.Background()); err != nil {
		fmt.Println("error:", err)
	}
	// Output:
	// 1
	// 4
	// 9
	// 16
	// 25
}
