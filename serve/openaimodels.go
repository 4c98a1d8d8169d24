// This file holds OpenAI's model routes: GET /v1/models (the one model,
// with llama-server's meta) and GET /v1/models/{id}.

package serve

import (
	"time"

	"github.com/valyala/fasthttp"
)

// handleModels lists the one model (OpenAI's shape, with llama-server's meta).
func (s *Server) handleModels(ctx *fasthttp.RequestCtx) {
	b := s.ready(ctx, dialectOpenAI)
	if b == nil {
		return
	}
	writeJSON(ctx, struct {
		Object string       `json:"object"`
		Data   []modelEntry `json:"data"`
	}{"list", []modelEntry{s.modelEntry(b)}})
}

// handleModel answers GET /v1/models/{id}: the model's entry when id is its
// name or an alias, else 404 (OpenAI's retrieve-model call).
func (s *Server) handleModel(ctx *fasthttp.RequestCtx, id string) {
	b := s.ready(ctx, dialectOpenAI)
	if b == nil {
		return
	}
	if _, e := s.modelName(b, id); e != nil || id == "" {
		if e == nil {
			e = notFound("model_not_found", "model %q not found", id)
		}
		e.write(ctx, dialectOpenAI)
		return
	}
	e := s.modelEntry(b)
	e.ID = id
	writeJSON(ctx, e)
}

type modelMeta struct {
	NVocab    int   `json:"n_vocab"`
	NCtx      int   `json:"n_ctx"`
	NCtxTrain int   `json:"n_ctx_train"`
	NEmbd     int   `json:"n_embd"`
	Size      int64 `json:"size"`
}

type modelEntry struct {
	ID      string    `json:"id"`
	Aliases []string  `json:"aliases"`
	Object  string    `json:"object"`
	Created int64     `json:"created"`
	OwnedBy string    `json:"owned_by"`
	Meta    modelMeta `json:"meta"`
}

func (s *Server) modelEntry(b *Backend) modelEntry {
	m := b.Bundle.Model
	aliases := s.cfg.Aliases
	if aliases == nil {
		aliases = []string{}
	}
	return modelEntry{ID: s.reportedName(b), Aliases: aliases, Object: "model", Created: time.Now().Unix(), OwnedBy: "flowinfer",
		Meta: modelMeta{NVocab: m.NVocab, NCtx: b.Engine.Config().NCtx, NCtxTrain: m.NCtxTrain, NEmbd: m.NEmbd, Size: b.Size}}
}
