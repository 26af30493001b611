// Package hostaddr knows the addresses of the host guard runs on, so that
// flows to them can be told apart from flows to the world: the VM must not
// reach the host's own services through a rule that does not name them.
package hostaddr

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// refresh is how stale the address list may get. Interfaces come and go
// (a VPN, a new veth), so the list is re-read, at most this often.
const refresh = 2 * time.Second

// Set is the host's current addresses: those of its interfaces and, on
// Linux, every prefix its local routing table delivers to itself (an
// address on lo with a /24 makes the whole /24 the host's). The zero Set
// is ready.
type Set struct {
	// List reads the addresses; net.InterfaceAddrs when nil. Tests set it.
	List func() ([]net.Addr, error)
	// Local reads the prefixes the host delivers to itself; the local
	// routing table on Linux, nothing elsewhere, when nil.
	Local func() ([]netip.Prefix, error)

	mu    sync.Mutex
	at    time.Time
	addrs map[netip.Addr]struct{}
	local []netip.Prefix
}

// Contains says a is one of the host's own addresses. A failure to read the
// interfaces keeps the last list.
func (s *Set) Contains(a netip.Addr) bool {
	a = a.WithZone("").Unmap()
	s.mu.Lock()
	defer s.mu.Unlock()
	if now := time.Now(); s.addrs == nil || now.Sub(s.at) > refresh {
		s.at = now
		if m, err := s.read(); err == nil {
			s.addrs = m
		} else if s.addrs == nil {
			s.addrs = map[netip.Addr]struct{}{}
		}
		local := s.Local
		if local == nil {
			local = localPrefixes
		}
		if p, err := local(); err == nil {
			s.local = p
		}
	}
	if _, ok := s.addrs[a]; ok {
		return true
	}
	for _, p := range s.local {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func (s *Set) read() (map[netip.Addr]struct{}, error) {
	list := s.List
	if list == nil {
		list = net.InterfaceAddrs
	}
	addrs, err := list()
	if err != nil {
		return nil, err
	}
	m := make(map[netip.Addr]struct{}, len(addrs))
	for _, a := range addrs {
		var ip net.IP
		switch v := a.(type) {
		case *net.IPNet:
			ip = v.IP
		case *net.IPAddr:
			ip = v.IP
		}
		if p, ok := netip.AddrFromSlice(ip); ok {
			m[p.Unmap()] = struct{}{}
		}
	}
	return m, nil
}
