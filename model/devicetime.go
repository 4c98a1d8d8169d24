package model

import "time"

// DeviceSpan is an interval of a backend's device work, or of the host
// waiting for the device (Wait), on the host's clock.
type DeviceSpan struct {
	Name       string // the span's name as marked (MarkDevice), or the wait's
	Start, End time.Time
	Wait       bool  // the host blocked until the device finished a submission
	Bytes      int64 // bytes the span moved (an upload's), 0 for others
}

// DeviceTimer is implemented by Ops that run on a device with its own
// clock (package gpu): the runtime marks where its spans begin and end in
// the work the device is given, and receives the device's own timing of
// them once the device has run them.
type DeviceTimer interface {
	// DeviceTiming reports why device timing is unavailable (nil: it is
	// available).
	DeviceTiming() error
	// TimeDevice starts timing with sink receiving each span as it is
	// resolved (after the submission holding it completes), or stops it
	// (nil sink).
	TimeDevice(sink func(DeviceSpan)) error
	// MarkDevice opens (begin) a span named name in the device's work, or
	// closes the innermost open one; it does nothing while timing is off.
	MarkDevice(name string, begin bool)
}
