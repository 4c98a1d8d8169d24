package serve

import (
	"bytes"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/flowinfer/flowinfer/graph"
)

// maxTraceWindow bounds GET /debug/trace?seconds=N.
const maxTraceWindow = 60 * time.Second

// handleDebugTrace captures a window of live traffic: it records for the
// requested seconds (default 5, at most 60) and answers with Chrome
// trace-event JSON of that window, the same format as `flowinfer trace`
// (open it in ui.perfetto.dev). The server's recorder is always on for
// /metrics; events older than the window are dropped first so the window
// fits in the recorder's event budget.
func (s *Server) handleDebugTrace(ctx *fasthttp.RequestCtx) {
	b := s.ready(ctx, dialectOpenAI)
	if b == nil {
		return
	}
	if b.Recorder == nil {
		badRequest("", "this server runs without a recorder").write(ctx, dialectOpenAI)
		return
	}
	window, e := traceWindow(ctx.QueryArgs().Peek("seconds"))
	if e != nil {
		e.write(ctx, dialectOpenAI)
		return
	}
	from := time.Now()
	b.Recorder.Forget(from)
	t := time.NewTimer(window)
	defer t.Stop()
	select {
	case <-t.C:
	case <-b.Done: // engine stopped: export what there is
	}
	var buf bytes.Buffer
	if err := b.Recorder.WriteChromeTraceOpts(&buf, graph.TraceOptions{From: from, To: time.Now(),
		Metadata: map[string]string{"source": "flowinfer serve /debug/trace", "window": window.String()}}); err != nil {
		ctx.SetStatusCode(fasthttp.StatusInternalServerError)
		ctx.SetBodyString(err.Error())
		return
	}
	ctx.SetContentType("application/json")
	ctx.Response.Header.Set("Content-Disposition", `attachment; filename="flowinfer-trace.json"`)
	ctx.SetBody(buf.Bytes())
}

// traceWindow parses ?seconds= (empty: 5 s), capped at maxTraceWindow.
func traceWindow(v []byte) (time.Duration, *apiError) {
	if len(v) == 0 {
		return 5 * time.Second, nil
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil || !(f > 0) {
		return 0, badRequest("seconds", "seconds must be a positive number, got %q", v)
	}
	// capped before the conversion: 1e20 s (or Inf) overflows a Duration
	// into a negative window
	return time.Duration(min(f, maxTraceWindow.Seconds()) * float64(time.Second)), nil
}
