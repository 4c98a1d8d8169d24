package serve

// peerwatch.go: noticing that the client of a request has left, whatever
// the request writes meanwhile. A write to a closed connection fails only
// two or three writes late, and many requests write nothing for long
// stretches: a non-streamed answer until it is complete, a stream during
// its prefill or while the tool-call parser holds back text that may be a
// call (the whole reply of a forced call). Without a watch, a client that
// gives up (a timeout in an SDK, Ctrl-C on curl) leaves its sequence
// generating up to max_tokens. The watcher peeks at the connection at an
// interval: a non-blocking MSG_PEEK read that returns end-of-file or a
// reset means the peer has closed its end. Peeking consumes nothing, so
// the server's own reads (a pipelined next request) are unaffected. Every
// generating or embedding request, streamed or not, runs under one
// (clientWatch).

import (
	"net"
	"time"
)

// clientWatch watches a request's connection for as long as the request
// runs: once the client has gone, gone is closed and release has been
// called (the request's jobs abandoned: the scheduler frees their
// sequences before its next step).
type clientWatch struct {
	gone chan struct{}
	stop func()
}

// watchClient starts watching c (watchPeer says which connections cannot
// be watched: then gone never closes and a failed write is the only
// sign). The caller must call stop.
func watchClient(c net.Conn, release func()) *clientWatch {
	w := &clientWatch{gone: make(chan struct{})}
	w.stop = watchPeer(c, peerCheckEvery, func() {
		close(w.gone)
		release()
	})
	return w
}

// left reports whether the client has gone.
func (w *clientWatch) left() bool {
	select {
	case <-w.gone:
		return true
	default:
		return false
	}
}

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
