package serve

import (
	"testing"
	"time"
)

// TestTraceWindow: huge and infinite windows are capped, not overflowed
// into a negative duration; bad ones are refused.
func TestTraceWindow(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		bad  bool
	}{
		{"", 5 * time.Second, false}, {"0.5", 500 * time.Millisecond, false}, {"1e9", maxTraceWindow, false},
		{"1e20", maxTraceWindow, false}, {"Inf", maxTraceWindow, false}, {"+Inf", maxTraceWindow, false},
		{"-1", 0, true}, {"0", 0, true}, {"NaN", 0, true}, {"-Inf", 0, true}, {"x", 0, true},
	} {
		got, e := traceWindow([]byte(tc.in))
		if (e != nil) != tc.bad || got != tc.want {
			t.Errorf("seconds=%s: %v, %v; want %v (refused %v)", tc.in, got, e, tc.want, tc.bad)
		}
	}
}
