//go:build !linux && !darwin

package control

import (
	"net"
	"os"
)

// peerUID cannot ask the kernel here; guard supports Linux and macOS, and
// elsewhere only the socket's file mode limits access.
func peerUID(net.Conn) (int, error) { return os.Getuid(), nil }
