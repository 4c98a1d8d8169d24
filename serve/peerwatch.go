package serve

// peerwatch.go: noticing that the client of a non-streamed request has
// left. A stream notices on its next write; a non-streamed request writes
// nothing until its answer is complete, so without this a client that
// gives up (a timeout in an SDK, Ctrl-C on curl) leaves its sequence
// generating up to max_tokens. The watcher peeks at the connection at an
// interval: a non-blocking MSG_PEEK read that returns end-of-file or a
// reset means the peer has closed its end. Peeking consumes nothing, so
// the server's own reads (a pipelined next request) are unaffected.

import (
	"net"
	"time"
)

// watchPeer calls gone once if the peer of c closes its end, checking every
// interval, until the returned stop function is called. stop waits for the
// watcher to exit, so c is not touched after it returns. Connections whose
// file descriptor cannot be peeked at (in-memory test listeners, non-Linux
// systems) are not watched.
func watchPeer(c net.Conn, interval time.Duration, gone func()) (stop func()) {
	if c == nil || !canPeek(c) {
		return func() {}
	}
	// the request has been read: lift the server's read timeout, which
	// would fail the peek after Config.ReadTimeout of a long prefill
	// (fasthttp sets a new deadline before reading the next request)
	c.SetReadDeadline(time.Time{})
	quit, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				if closed, ok := peerClosed(c); ok && closed {
					gone()
					return
				}
			}
		}
	}()
	return func() {
		close(quit)
		<-exited
	}
}
