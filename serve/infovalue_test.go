package serve

import (
	"github.com/flowinfer/flowinfer/io/gguf"
	"github.com/flowinfer/flowinfer/model"
)

// infoValue is what /api/show's model_info holds for a metadata value
// (ollamashow_internal_test.go): model's conversion, then serve's.
func infoValue(v gguf.Value, verbose bool) any {
	return jsonValue(model.MetaValue(v, infoArrays(verbose)))
}
