// This file holds POST /v1/completions, OpenAI's legacy text completion:
// one prompt (a string or token ids) generated from as it is, with no chat
// template; echo and suffix are refused. The fields it shares with chat
// are openai.go's; the response and its chunks, openaiencode.go's.

package serve

import (
	"encoding/json"

	"github.com/valyala/fasthttp"
)

type oaiCompletionRequest struct {
	Prompt json.RawMessage `json:"prompt"`
	Echo   bool            `json:"echo"`
	Suffix *string         `json:"suffix"`
	oaiCommon
}

func (s *Server) handleCompletions(ctx *fasthttp.RequestCtx) {
	s.generateOpenAI(ctx, &oaiCompletionRequest{}, oaiCompletionFields, "cmpl-", "/v1/completions", "prompt")
}

func (r *oaiCompletionRequest) translate(s *Server, b *Backend) (*genRequest, *apiError) {
	gr := &genRequest{}
	if isNull(r.Prompt) {
		return nil, badRequest("prompt", "prompt is required")
	}
	if r.Echo {
		return nil, badRequest("echo", "echo is not supported")
	}
	if r.Suffix != nil && *r.Suffix != "" {
		return nil, badRequest("suffix", "suffix is not supported")
	}
	// A string, one string in an array, token ids, or one array of ids.
	var str string
	var strs []string
	var ids []int32
	var idss [][]int32
	switch {
	case json.Unmarshal(r.Prompt, &str) == nil:
		gr.prompt = str
	case json.Unmarshal(r.Prompt, &strs) == nil && len(strs) == 1:
		gr.prompt = strs[0]
	case json.Unmarshal(r.Prompt, &ids) == nil && len(ids) > 0:
		gr.tokens = ids
	case json.Unmarshal(r.Prompt, &idss) == nil && len(idss) == 1 && len(idss[0]) > 0:
		gr.tokens = idss[0]
	case len(strs) > 1 || len(idss) > 1:
		return nil, badRequest("prompt", "only one prompt per request is supported")
	default:
		return nil, badRequest("prompt", "prompt must be a string, an array of one string, or an array of token ids")
	}
	if e := r.oaiCommon.translate(s, b, gr); e != nil {
		return nil, e
	}
	return gr, nil
}
