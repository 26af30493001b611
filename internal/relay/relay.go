// Package relay copies between two connections, the way the proxy's
// pass-through and the network stack's direct flows both need: each
// direction's end is passed on as a half-close, and it returns once both
// directions have ended.
package relay

import (
	"io"
	"net"
)

// Both copies a→b and b→a until both end. A clean end of one direction
// is passed on as a half-close; a failure (a connection closed under it,
// as when a policy change cuts the flow) closes both, so that neither end
// lingers waiting for the other.
func Both(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		if _, err := io.Copy(dst, src); err != nil {
			a.Close()
			b.Close()
		} else if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		} else {
			dst.Close()
		}
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	<-done
}
