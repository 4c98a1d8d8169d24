// This file holds the body writer of a streamed answer, which one job
// (stream, any encoder) and the n choices of an OpenAI request (streamN,
// choices.go) share: the headers; a panic recovered and logged; the watch
// on the client's connection (peerwatch.go), which ends the stream and its
// jobs once the client has gone even while nothing is written; a first
// heartbeat at once, so that the client sees the stream open while the
// prompt is evaluated; heartbeats whenever nothing was written for a
// period (text held back by the tool-call parser is not written); the
// engine's failure written as the stream's end; and the step that passes
// a job's new output to its encoder. What a stream writes around the
// steps is its user's.

package serve

import (
	"bufio"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/flowinfer/flowinfer/stages"
)

// streamWriter is the state of a stream's body writer.
type streamWriter struct {
	s         *Server
	b         *Backend
	w         *bufio.Writer
	enc       encoder         // writes the heartbeats and the engine's failure,
	j         *job            // as this job's
	gone      <-chan struct{} // closed once the client has left
	every     time.Duration
	tick      *time.Ticker
	lastWrite time.Time
}

// openStream answers with a stream whose body body writes. release ends
// the stream's jobs when the writer returns (done, or the client gone: the
// scheduler frees the sequences), or as soon as the connection's watch
// sees the client gone; enc and j write the heartbeats and the engine's
// failure.
func (s *Server) openStream(ctx *fasthttp.RequestCtx, b *Backend, j *job, enc encoder, release func(), body func(sw *streamWriter)) {
	ctx.SetContentType(enc.streamType())
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.Response.Header.Set("X-Accel-Buffering", "no")
	hbEvery := s.cfg.Heartbeat
	log := s.cfg.Log
	// the writer runs after the handler has returned, on fasthttp's own
	// goroutine, while the server copies what it writes to this connection
	conn := ctx.Conn()
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		defer release()
		watch := watchClient(conn, release)
		defer watch.stop()
		defer func() {
			if p := recover(); p != nil {
				log.Error("panic in stream writer", zap.String("id", j.id), zap.Any("panic", p), zap.Stack("stack"))
			}
		}()
		// Send the headers now (and a first heartbeat): clients see the
		// stream open while the prompt is evaluated.
		enc.heartbeat(w)
		if w.Flush() != nil {
			return
		}
		tick := time.NewTicker(hbEvery)
		defer tick.Stop()
		body(&streamWriter{s: s, b: b, w: w, enc: enc, j: j, gone: watch.gone, every: hbEvery, tick: tick, lastWrite: time.Now()})
	})
}

// wait returns true once wake fires, writing a heartbeat whenever nothing
// was written for a period; false: the stream is over (the client is
// gone, the engine stopped, which it has written, or the server stops).
func (sw *streamWriter) wait(wake <-chan struct{}) bool {
	for {
		select {
		case <-wake:
			return true
		case <-sw.tick.C:
			if time.Since(sw.lastWrite) >= sw.every && sw.enc.heartbeat(sw.w) {
				if sw.w.Flush() != nil {
					return false
				}
				sw.lastWrite = time.Now()
			}
		case <-sw.b.Done:
			sw.enc.fail(sw.w, sw.j, errEngineDown)
			sw.w.Flush()
			return false
		case <-sw.s.stop:
			return false
		case <-sw.gone:
			return false
		}
	}
}

// flush sends what was written; false: the client is gone. A step that
// wrote nothing (its text held back) does not count as a write, so that
// the heartbeats go on.
func (sw *streamWriter) flush() bool {
	wrote := sw.w.Buffered() > 0
	if sw.w.Flush() != nil {
		return false
	}
	if wrote {
		sw.lastWrite = time.Now()
	}
	return true
}

// step passes what j produced since the last step to enc: begin once j
// has started (begun keeps track), its text, and at its end (final) the
// closing chunks, or the failure (failed).
func (sw *streamWriter) step(j *job, enc encoder, begun *bool) (final *stages.Event, failed bool) {
	text, usage, started, final := j.take()
	if started && !*begun {
		enc.begin(sw.w, j, usage)
		*begun = true
	}
	var end *stages.Event
	if final != nil && final.Finish != stages.FinishError {
		end = final
	}
	streamText(sw.w, j, enc, text, end)
	switch {
	case final == nil:
	case final.Finish == stages.FinishError:
		sw.s.cfg.Log.Error("generation failed", zap.String("id", j.id), zap.Error(final.Err))
		enc.fail(sw.w, j, sw.s.failedError(sw.b, "generation", final.Err))
		return final, true
	default:
		sw.s.metrics.finished(final)
		enc.end(sw.w, j, final)
	}
	return final, false
}

// stream answers with the job's events as they come, flushing each.
func (s *Server) stream(ctx *fasthttp.RequestCtx, b *Backend, j *job, enc encoder) {
	s.openStream(ctx, b, j, enc, j.abandon, func(sw *streamWriter) {
		begun := false
		for sw.wait(j.wake) {
			if final, _ := sw.step(j, enc, &begun); final != nil {
				sw.w.Flush()
				return
			}
			if !sw.flush() {
				return
			}
		}
	})
}
