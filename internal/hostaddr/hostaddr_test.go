package hostaddr

import (
	"errors"
	"net"
	"net/netip"
	"testing"
)

func TestContains(t *testing.T) {
	fail := false
	s := &Set{List: func() ([]net.Addr, error) {
		if fail {
			return nil, errors.New("netlink busy")
		}
		return []net.Addr{
			&net.IPNet{IP: net.ParseIP("192.168.1.5").To4(), Mask: net.CIDRMask(24, 32)},
			&net.IPNet{IP: net.ParseIP("fe80::1"), Mask: net.CIDRMask(64, 128)},
		}, nil
	}}
	for _, tc := range []struct {
		addr string
		want bool
	}{
		{"192.168.1.5", true},
		{"::ffff:192.168.1.5", true},
		{"fe80::1%eth0", true},
		{"192.168.1.6", false},
		{"8.8.8.8", false},
	} {
		if got := s.Contains(netip.MustParseAddr(tc.addr)); got != tc.want {
			t.Errorf("%s: got %v", tc.addr, got)
		}
	}
	// A failed re-read keeps what was known.
	fail = true
	s.at = s.at.Add(-refresh * 2)
	if !s.Contains(netip.MustParseAddr("192.168.1.5")) {
		t.Error("a failed refresh forgot the host's address")
	}
}

func TestRealInterfaces(t *testing.T) {
	var s Set
	if !s.Contains(netip.MustParseAddr("127.0.0.1")) {
		t.Error("127.0.0.1 is not among this host's addresses")
	}
}
