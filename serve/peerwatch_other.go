//go:build !linux

package serve

import "net"

func canPeek(net.Conn) bool { return false }

func peerClosed(net.Conn) (closed, ok bool) { return false, false }
