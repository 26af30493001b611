package netstack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
)

// Pinger sends one ICMP echo request from the host and returns once the
// destination has answered it. The stack replies to the VM's ping only
// then, so a reply the VM sees is a reply the destination really sent.
type Pinger interface {
	Echo(ctx context.Context, dst netip.Addr, seq uint16, payload []byte) error
}

// HostPinger pings through the host's ICMP sockets: an unprivileged ping
// socket where the host allows one (macOS, or Linux with
// net.ipv4.ping_group_range covering guardd's group), a raw socket
// otherwise (root or CAP_NET_RAW).
type HostPinger struct {
	network string // "udp4" or "ip4:icmp"
}

// NewHostPinger finds a way to ping from this host, or says why there is
// none.
func NewHostPinger() (*HostPinger, error) {
	var errs []error
	for _, network := range []string{"udp4", "ip4:icmp"} {
		c, err := icmp.ListenPacket(network, "0.0.0.0")
		if err == nil {
			c.Close()
			return &HostPinger{network: network}, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("netstack: no ICMP socket (allow ping sockets with sysctl net.ipv4.ping_group_range, or run as root): %w", errors.Join(errs...))
}

// Echo implements Pinger with a socket of its own per request, so replies
// need no demultiplexing beyond the request's identifier and sequence.
func (p *HostPinger) Echo(ctx context.Context, dst netip.Addr, seq uint16, payload []byte) error {
	if !dst.Is4() {
		return errors.New("netstack: ping is IPv4 only")
	}
	c, err := icmp.ListenPacket(p.network, "0.0.0.0")
	if err != nil {
		return fmt.Errorf("netstack: ping socket: %w", err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.SetReadDeadline(time.Now()) })
	defer stop()
	// A ping socket's identifier is its port, set by the kernel; a raw
	// socket sees every reply on the host, so it picks one to match.
	id := int(rand.Uint32N(1 << 16))
	msg, err := (&icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: id, Seq: int(seq), Data: payload}}).Marshal(nil)
	if err != nil {
		return err
	}
	var to net.Addr = &net.IPAddr{IP: dst.AsSlice()}
	if p.network == "udp4" {
		to = &net.UDPAddr{IP: dst.AsSlice()}
	}
	if _, err := c.WriteTo(msg, to); err != nil {
		return fmt.Errorf("netstack: ping %s: %w", dst, err)
	}
	buf := make([]byte, 1500+len(payload))
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("netstack: ping %s: %w", dst, err)
		}
		reply, err := icmp.ParseMessage(1, buf[:n])
		if err != nil || reply.Type != ipv4.ICMPTypeEchoReply {
			continue
		}
		echo, ok := reply.Body.(*icmp.Echo)
		if !ok || echo.Seq != int(seq) || !bytes.Equal(echo.Data, payload) || !sameHost(from, dst) {
			continue
		}
		if p.network != "udp4" && echo.ID != id {
			continue
		}
		return nil
	}
}

func sameHost(from net.Addr, dst netip.Addr) bool {
	var ip net.IP
	switch a := from.(type) {
	case *net.IPAddr:
		ip = a.IP
	case *net.UDPAddr:
		ip = a.IP
	}
	got, ok := netip.AddrFromSlice(ip)
	return ok && got.Unmap() == dst
}
