// This file holds the API error type and its three wire shapes: OpenAI
// {"error":{message,type,param,code}}, Anthropic {"type":"error",
// "error":{type,message}} and Ollama {"error":"..."}. Every failure a handler
// can meet becomes an apiError with an HTTP status; nothing bad in a request
// reaches a 500.

package serve

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/flowinfer/flowinfer/stages"
)

// dialect is the API family of an endpoint: it decides the error shape.
type dialect int

const (
	dialectOpenAI dialect = iota
	dialectAnthropic
	dialectOllama
)

// apiError is an error answered to the client.
type apiError struct {
	status  int
	kind    string // OpenAI "type"; mapped to Anthropic's types by status
	param   string // OpenAI "param": the offending field, if known
	code    string // OpenAI "code", e.g. "context_length_exceeded"
	message string
	retry   int // Retry-After seconds (429, 503)
}

func (e *apiError) Error() string { return e.message }

func badRequest(param, format string, args ...any) *apiError {
	return &apiError{status: fasthttp.StatusBadRequest, kind: "invalid_request_error", param: param, message: fmt.Sprintf(format, args...)}
}

func notFound(code, format string, args ...any) *apiError {
	return &apiError{status: fasthttp.StatusNotFound, kind: "not_found_error", code: code, message: fmt.Sprintf(format, args...)}
}

var (
	errUnauthorized = &apiError{status: fasthttp.StatusUnauthorized, kind: "authentication_error", code: "invalid_api_key", message: "invalid or missing API key"}
	errQueueFull    = &apiError{status: fasthttp.StatusTooManyRequests, kind: "rate_limit_error", code: "queue_full", message: "the server is busy: request queue is full, retry later", retry: 1}
	errLoading      = &apiError{status: fasthttp.StatusServiceUnavailable, kind: "unavailable_error", message: "Loading model", retry: 1}
	errDraining     = &apiError{status: fasthttp.StatusServiceUnavailable, kind: "unavailable_error", message: "the server is shutting down", retry: 1}
	errEngineDown   = &apiError{status: fasthttp.StatusServiceUnavailable, kind: "unavailable_error", message: "the inference engine has stopped"}
	errBodyTooLarge = &apiError{status: fasthttp.StatusRequestEntityTooLarge, kind: "invalid_request_error", code: "request_too_large", message: "request body is larger than the server's limit"}
)

// anthropicType maps an error to Anthropic's error types.
func (e *apiError) anthropicType() string {
	switch e.status {
	case 400:
		return "invalid_request_error"
	case 401:
		return "authentication_error"
	case 403:
		return "permission_error"
	case 404:
		return "not_found_error"
	case 413:
		return "request_too_large"
	case 429:
		return "rate_limit_error"
	case 503:
		return "overloaded_error"
	}
	return "api_error"
}

// body encodes e in the dialect's shape.
func (e *apiError) body(d dialect) []byte {
	var v any
	switch d {
	case dialectAnthropic:
		v = struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}{Type: "error", Error: struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		}{e.anthropicType(), e.message}}
	case dialectOllama:
		v = struct {
			Error string `json:"error"`
		}{e.message}
	default:
		type inner struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    *string `json:"code"`
		}
		in := inner{Message: e.message, Type: e.kind}
		if e.param != "" {
			in.Param = &e.param
		}
		if e.code != "" {
			in.Code = &e.code
		}
		v = struct {
			Error inner `json:"error"`
		}{in}
	}
	b, _ := json.Marshal(v) // plain structs of strings: cannot fail
	return b
}

// write answers the request with e.
func (e *apiError) write(ctx *fasthttp.RequestCtx, d dialect) {
	ctx.Response.Reset()
	ctx.SetStatusCode(e.status)
	ctx.SetContentType("application/json")
	if e.retry > 0 {
		ctx.Response.Header.Set("Retry-After", fmt.Sprint(e.retry))
	}
	ctx.SetBody(e.body(d))
}

// modelFailed is the answer while the model is marked failed
// (SetModelFailed): 503 naming the model by the name clients use.
func (s *Server) modelFailed(b *Backend, reason string) *apiError {
	return &apiError{status: fasthttp.StatusServiceUnavailable, kind: "unavailable_error", code: "model_unavailable",
		message: fmt.Sprintf("model %q is unavailable: %s", s.reportedName(b), reason), retry: 5}
}

// failedError is the answer to a request the engine ended with err (what
// is "generation" or "embedding"). A weight that could not be read
// (stages.ErrWeightRead: the model file changed, or the disk failed) is a
// 503 naming the model by the name clients use: the details, the server's
// file path and byte offsets among them, are for the server's log (the
// caller logs err), not for clients.
func (s *Server) failedError(b *Backend, what string, err error) *apiError {
	if errors.Is(err, stages.ErrWeightRead) {
		return &apiError{status: fasthttp.StatusServiceUnavailable, kind: "unavailable_error", code: "model_unavailable",
			message: fmt.Sprintf("%s failed: the weights of model %q could not be read (its file changed or is unreadable)", what, s.reportedName(b)), retry: 5}
	}
	return &apiError{status: 500, kind: "server_error", message: fmt.Sprintf("%s failed: %v", what, err)}
}

// decodeError turns a JSON decoding error into a 400 naming the field.
func decodeError(err error) *apiError {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		field := jsonPath(te.Field)
		if field == "" {
			return badRequest("", "request body must be a JSON object, not %s", te.Value)
		}
		if want := jsonTypeName(te.Type.String()); want == "a number" && strings.HasPrefix(te.Value, "number") {
			// a number that does not fit the field's type (1e308 in a float32)
			return badRequest(field, "field %q: %s is out of range for this field", field, te.Value)
		}
		return badRequest(field, "field %q: expected %s, got %s", field, jsonTypeName(te.Type.String()), te.Value)
	case errors.As(err, &se):
		return badRequest("", "invalid JSON at byte %d: %v", se.Offset, err)
	}
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	return badRequest("", "invalid JSON: %v", strings.TrimPrefix(err.Error(), "json: "))
}

// jsonPath drops the names of embedded structs from a decoder's field
// path ("oaiCommon.samplingFields.temperature" -> "temperature"), leaving
// the field as the request spelled it.
func jsonPath(field string) string {
	parts := strings.Split(field, ".")
	kept := parts[:0]
	for _, p := range parts {
		switch p {
		case "oaiCommon", "samplingFields", "ollamaCommon", "structuredFields":
			continue
		}
		kept = append(kept, p)
	}
	return strings.Join(kept, ".")
}

// jsonTypeName names a Go type as a JSON type for error messages.
func jsonTypeName(goType string) string {
	switch {
	case strings.HasPrefix(goType, "[]"):
		return "an array"
	case strings.HasPrefix(goType, "map["), strings.Contains(goType, "struct"), strings.HasPrefix(goType, "serve."):
		return "an object"
	case strings.HasPrefix(goType, "int"), strings.HasPrefix(goType, "uint"):
		return "an integer"
	case strings.HasPrefix(goType, "float"):
		return "a number"
	case goType == "string":
		return "a string"
	case goType == "bool":
		return "a boolean"
	}
	return goType
}
