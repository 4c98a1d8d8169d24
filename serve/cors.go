// This file answers browsers' cross-origin checks (CORS, the Fetch
// standard) for the origins Config.CORSOrigins allows: a preflight OPTIONS
// gets 204 with the allowed method and the headers it asked for, and every
// response to an allowed origin carries Access-Control-Allow-Origin. Other
// origins get no CORS headers, so browsers keep refusing them; clients
// that are not browsers are unaffected either way.

package serve

import (
	"slices"

	"github.com/valyala/fasthttp"
)

// corsMaxAge is how long (seconds) a browser may cache a preflight answer.
const corsMaxAge = "600"

// corsOrigin returns the Access-Control-Allow-Origin value for the
// request's Origin, or "" when CORS is off or the origin is not allowed.
func (s *Server) corsOrigin(ctx *fasthttp.RequestCtx) string {
	origin := string(ctx.Request.Header.Peek("Origin"))
	if origin == "" || len(s.cfg.CORSOrigins) == 0 {
		return ""
	}
	switch {
	case slices.Contains(s.cfg.CORSOrigins, "*") && s.cfg.APIKey == "":
		return "*"
	case slices.Contains(s.cfg.CORSOrigins, "*") || slices.Contains(s.cfg.CORSOrigins, origin):
		// with a key, echo the origin: "*" is not allowed with credentials
		return origin
	}
	return ""
}

// corsHeaders adds the CORS headers of a response to an allowed origin.
// handle calls it last, after the handler (an error resets the response's
// headers): errors reach the page too.
func (s *Server) corsHeaders(ctx *fasthttp.RequestCtx) {
	if len(s.cfg.CORSOrigins) == 0 || len(ctx.Request.Header.Peek("Origin")) == 0 {
		return
	}
	h := &ctx.Response.Header
	h.Add("Vary", "Origin")
	if o := s.corsOrigin(ctx); o != "" {
		h.Set("Access-Control-Allow-Origin", o)
		h.Set("Access-Control-Expose-Headers", "Retry-After, WWW-Authenticate")
	}
}

// corsPreflight answers a preflight (OPTIONS with
// Access-Control-Request-Method) from an allowed origin with 204, the
// route's method and the headers it asked for, without authentication, as
// browsers send preflights without credentials. It reports whether it did.
func (s *Server) corsPreflight(ctx *fasthttp.RequestCtx, method string) bool {
	reqMethod := ctx.Request.Header.Peek("Access-Control-Request-Method")
	if !ctx.IsOptions() || len(reqMethod) == 0 || s.corsOrigin(ctx) == "" {
		return false
	}
	h := &ctx.Response.Header
	h.Set("Access-Control-Allow-Methods", method+", OPTIONS")
	if hdrs := ctx.Request.Header.Peek("Access-Control-Request-Headers"); len(hdrs) > 0 {
		h.Set("Access-Control-Allow-Headers", string(hdrs))
		h.Add("Vary", "Access-Control-Request-Headers")
	}
	h.Set("Access-Control-Max-Age", corsMaxAge)
	ctx.SetStatusCode(fasthttp.StatusNoContent)
	return true
}
