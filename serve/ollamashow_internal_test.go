package serve

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/flowinfer/flowinfer/io/gguf"
)

// TestInfoValue: metadata values as /api/show's model_info encodes them;
// long arrays are null unless verbose.
func TestInfoValue(t *testing.T) {
	long := make([]string, maxInfoArray+1)
	arr, err := gguf.Array(gguf.TypeFloat32, []gguf.Value{gguf.Float32(0.5), gguf.Float32(1e-5)})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		v       gguf.Value
		verbose bool
		want    string
	}{
		{gguf.Uint32(4096), false, `4096`},
		{gguf.Int32(-3), false, `-3`},
		{gguf.Float32(1e-5), false, `0.00001`},
		{gguf.Float32(float32(math.Inf(1))), false, `null`},
		{gguf.Bool(true), false, `true`},
		{gguf.String("llama"), false, `"llama"`},
		{arr, false, `[0.5,0.00001]`},
		{gguf.Strings([]string{"a", "b"}), false, `["a","b"]`},
		{gguf.Strings(long), false, `null`},
	} {
		b, err := json.Marshal(infoValue(c.v, c.verbose))
		if err != nil || string(b) != c.want {
			t.Errorf("%v: %s (%v), want %s", c.v, b, err, c.want)
		}
	}
	b, _ := json.Marshal(infoValue(gguf.Strings(long), true))
	var got []string
	if json.Unmarshal(b, &got) != nil || len(got) != len(long) {
		t.Errorf("verbose: %d elements", len(got))
	}
}
