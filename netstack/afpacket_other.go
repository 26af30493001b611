//go:build !linux

package netstack

import (
	"errors"

	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// OpenAFPacket needs Linux packet sockets.
func OpenAFPacket(ifname string, mtu uint32) (stack.LinkEndpoint, func() error, error) {
	return nil, nil, errors.New("afpacket:" + ifname + ": raw packet sockets need Linux")
}

// OpenTAP needs Linux TAP devices.
func OpenTAP(ifname string, mtu uint32) (stack.LinkEndpoint, func() error, error) {
	return nil, nil, errors.New("tap:" + ifname + ": TAP devices need Linux here")
}

// OpenAFPacketIn needs Linux network namespaces.
func OpenAFPacketIn(nsPath, ifname string, mtu uint32) (stack.LinkEndpoint, func() error, error) {
	return nil, nil, errors.New("afpacket:" + ifname + ": network namespaces need Linux")
}
