// This file holds the prologue every endpoint handler with a request body
// runs: the backend ready (503 while the model loads, while the server
// drains, or after the engine stopped), the body decoded and its
// documented fields checked (fields.go), and, for the handlers that
// generate, the request translated into a genRequest. Each step writes its
// error in the endpoint's dialect; the handler only stops. What comes
// after (generating, embedding, counting) is the handlers' own.

package serve

import "github.com/valyala/fasthttp"

// translator is an API request that translates itself into the internal
// request.
type translator interface {
	translate(s *Server, b *Backend) (*genRequest, *apiError)
}

// receive returns the backend once the body is decoded into req (a
// pointer to a request struct) and rules are applied to the documented
// fields it does not decode. On an error it has written it in d's shape
// and returns nil.
func (s *Server) receive(ctx *fasthttp.RequestCtx, d dialect, req any, rules map[string]fieldRule) *Backend {
	b := s.ready(ctx, d)
	if b == nil {
		return nil
	}
	if e := s.decodeRequest(ctx, req, rules); e != nil {
		e.write(ctx, d)
		return nil
	}
	return b
}

// prepare is receive, then req's translation: the prologue of the
// handlers that generate. A nil genRequest: the error is written.
func (s *Server) prepare(ctx *fasthttp.RequestCtx, d dialect, req translator, rules map[string]fieldRule) (*Backend, *genRequest) {
	b := s.receive(ctx, d, req, rules)
	if b == nil {
		return nil, nil
	}
	gr, e := req.translate(s, b)
	if e != nil {
		e.write(ctx, d)
		return nil, nil
	}
	return b, gr
}
