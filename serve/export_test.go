package serve

import "reflect"

// DecodedFields returns the top-level JSON fields an endpoint's request
// struct decodes, and the names its field rules cover (fields_test.go).
func DecodedFields(path string) (decoded, ruled map[string]bool) {
	reqs := map[string]struct {
		v     any
		rules map[string]fieldRule
	}{
		"/v1/chat/completions": {&oaiChatRequest{}, oaiChatFields},
		"/v1/completions":      {&oaiCompletionRequest{}, oaiCompletionFields},
		"/v1/responses":        {&respRequest{}, respFields},
		"/v1/messages":         {&antRequest{}, antFields},
		"/api/chat":            {&ollamaChatRequest{}, ollamaChatFields},
		"/api/generate":        {&ollamaGenerateRequest{}, ollamaGenerateFields},
		"/v1/embeddings":       {&oaiEmbeddingRequest{}, oaiEmbeddingFields},
		"/api/embed":           {&ollamaEmbedRequest{}, ollamaEmbedFields},
		"/api/show":            {&ollamaShowRequest{}, ollamaShowFields},
		"options":              {&ollamaOptions{}, ollamaOptionFields},
	}
	r := reqs[path]
	ruled = map[string]bool{}
	for k := range r.rules {
		ruled[k] = true
	}
	return jsonFields(reflect.TypeOf(r.v)), ruled
}

// SetScript makes s answer every generation request with pieces instead of
// running the engine: fn gets the prompt's tokens and returns the
// generated text, piece by piece, which goes through the same mailbox,
// parser and encoders as the engine's output (tools_test.go).
func SetScript(s *Server, fn func(prompt []int32) []string) { s.script = fn }

// Route is an endpoint's method and whether it needs no API key.
type Route struct {
	Method string
	Public bool
}

// Routes returns the server's fixed routes (errors_test.go).
func Routes() map[string]Route {
	out := map[string]Route{}
	for p, r := range routeTable() {
		out[p] = Route{r.method, r.public}
	}
	return out
}
