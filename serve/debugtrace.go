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
	window := 5 * time.Second
	if v := ctx.QueryArgs().Peek("seconds"); len(v) > 0 {
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil || !(f > 0) {
			badRequest("seconds", "seconds must be a positive number, got %q", v).write(ctx, dialectOpenAI)
			return
		}
		window = min(time.Duration(f*float64(time.Second)), maxTraceWindow)
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
