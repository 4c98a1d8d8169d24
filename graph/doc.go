// Package graph is the generic stage runtime flowinfer runs on: named stages
// joined by typed, bounded edges, run together with errgroup semantics, plus
// a recorder that traces where each stage spends its time. It knows nothing
// about LLMs.
//
// # Building a graph
//
// A graph is declared first and run later; nothing starts before Run.
//
//	g := graph.New(rec)                            // rec may be nil: no tracing
//	src, sq, sink := g.Stage("source"), g.Stage("square"), g.Stage("sink")
//	srcOut, sqIn := graph.Connect[int](src, sq, 64) // edge of capacity 64
//	sqOut, sinkIn := graph.Connect[int](sq, sink, 64)
//	src.Do(func(ctx context.Context) error { ... srcOut.Send(ctx, v) ... })
//	sq.Do(func(ctx context.Context) error { return square(ctx, sqIn, sqOut) })
//	sink.Do(func(ctx context.Context) error { ... sinkIn.Recv(ctx) ... })
//	err := g.Run(ctx)
//
// A stage is a name and a function; the function receives the ports the
// graph made for it (usually by closure: a stage type in another package
// exposes Run(ctx, in, out) error and the wiring code calls it from Do).
// Connect makes the edge, a channel of the given capacity, and returns its
// two ends: an *Out for the producing stage and an *In for the consuming one.
// Each edge has exactly one producer and one consumer; a stage may have any
// number of inputs and outputs, and edges may form cycles.
//
// # Ports
//
// Out.Send blocks while the edge is full: that blocking is the backpressure,
// and nothing in the graph is unbounded. In.Recv blocks while the edge is
// empty and returns io.EOF once the producer has returned and the edge is
// drained. Both give up with ctx.Err() when the context is cancelled. In.TryRecv
// polls an input without blocking (a scheduler polls its admission queue this
// way between steps while it blocks on its feedback edge). Ports belong to
// their stage: use them from the stage's goroutine and never after it returns.
//
// # Running and stopping
//
// Run starts one goroutine per stage and waits for all of them. When a stage
// returns, the runtime closes its outputs (downstream sees io.EOF after the
// buffered items) and its inputs (a producer still sending to it gets
// ErrConsumerGone instead of blocking forever). The first stage error, wrapped with
// the stage name, cancels the context of every other stage and is what Run
// returns; it is recorded and the context cancelled before the failed stage's
// outputs are closed, so a downstream stage sees cancellation rather than a
// clean end of input, and its own error cannot mask the original one. A panic
// in a stage is recovered and becomes an error matching ErrPanic. A stage that
// returns an error matching ErrConsumerGone has merely seen its consumer leave; the
// runtime treats that as a normal return.
//
// There are two ways to stop:
//
//   - Drain: the source stops producing and returns; end of input flows down
//     the graph and every item already in flight is processed. Run returns
//     nil once all stages have returned.
//   - Abort: cancel the context passed to Run; every Send and Recv returns
//     promptly and Run returns the first stage's context error. Work that
//     does not go through ports (a long computation, a file read) must
//     watch ctx itself for abort to stay prompt.
//
// # Cycles
//
// An edge may feed an earlier stage (the sampler's tokens back to the
// scheduler). The runtime needs nothing special for that, but the stage that
// closes the loop owns its termination: on drain it returns once its source
// input has reached io.EOF and nothing it sent is still in flight around the
// loop; the rest of the loop then ends by end of input. It must also keep
// the items it has in flight at or below the sum of the loop's edge
// capacities: with more, every stage of the loop can end up blocked in Send,
// holding one item each, and the loop deadlocks (abort still ends it).
//
// # Recording
//
// A Recorder passed to New records, per stage, the time spent waiting for
// input (blocked in Recv), blocked on output (blocked in Send) and, as the
// rest of the stage's wall time, busy. Stages add named counters (Add for
// running totals such as bytes moved or cache hits, Sample for gauges such
// as queue depth) and named sub-spans:
//
//	span := rec.Begin(stage, "layer 3 attn")
//	...
//	span.End()
//
// Summary gives per-stage totals; WriteChromeTrace writes Chrome trace-event
// JSON (one track per stage) that ui.perfetto.dev opens.
//
// With a nil or disabled recorder, ports, Begin, End, Add and Sample
// allocate nothing and take no timestamps. With recording on, ports take
// timestamps only when they actually block, and events go into per-stage
// chunks allocated a few thousand at a time; each stage has its own buffer
// and lock, so stages never contend with each other. The accounting assumes
// one goroutine uses a stage's ports: a stage that shares them among
// goroutines of its own still records safely, but its waiting and blocked
// times then overlap and its busy time is understated.
package graph
