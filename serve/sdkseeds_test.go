// sdkseeds_test.go: the requests of the SDK tests in sdktest/, read at test
// time (internal/sdkreq), seed the fuzz targets.

package serve_test

import (
	"encoding/json"
	"testing"

	"github.com/flowinfer/flowinfer/internal/sdkreq"
)

// sdkRequests returns the SDK tests' request bodies by API path.
func sdkRequests(t testing.TB) map[string][]string {
	t.Helper()
	reqs, err := sdkreq.Requests("sdktest")
	if err != nil {
		t.Fatal(err)
	}
	return reqs
}

// TestSDKRequests: the SDK tests' requests are read (so the fuzz seeds do
// not silently dwindle when the SDK tests change).
func TestSDKRequests(t *testing.T) {
	reqs := sdkRequests(t)
	for path, min := range map[string]int{"/v1/chat/completions": 6, "/v1/completions": 5, "/v1/messages": 4, "/v1/responses": 3} {
		if len(reqs[path]) < min {
			t.Errorf("%s: %d requests read from sdktest, want at least %d: %q", path, len(reqs[path]), min, reqs[path])
		}
		for _, r := range reqs[path] {
			if !json.Valid([]byte(r)) {
				t.Errorf("%s: %s", path, r)
			}
		}
	}
	for path, rs := range reqs {
		for _, r := range rs {
			t.Logf("%s %s", path, r)
		}
	}
}
