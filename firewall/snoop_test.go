package firewall

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) Now() time.Time          { return c.t }
func (c *fakeClock) Advance(d time.Duration) { c.t = c.t.Add(d) }

func newClock() *fakeClock { return &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func TestSnoopCNAMEChain(t *testing.T) {
	clk := newClock()
	s := NewSnoopTable(SnoopOptions{Now: clk.Now, MinTTL: time.Second})
	ip := netip.MustParseAddr("192.0.2.7")
	// www.example.com CNAME www.example.com.cdn.test, A 192.0.2.7.
	s.Record([]string{"WWW.Example.com.", "www.example.com.cdn.test."}, ip, 300*time.Second)
	got := s.Names(ip)
	want := []string{"www.example.com", "www.example.com.cdn.test"}
	if !slices.Equal(got, want) {
		t.Fatalf("names %v, want %v", got, want)
	}
	// Mapped spelling of the address reads the same entry.
	if got := s.Names(netip.MustParseAddr("::ffff:192.0.2.7")); !slices.Equal(got, want) {
		t.Fatalf("mapped lookup gave %v", got)
	}
}

func TestSnoopTTL(t *testing.T) {
	clk := newClock()
	s := NewSnoopTable(SnoopOptions{Now: clk.Now, MinTTL: 10 * time.Second, MaxTTL: time.Hour})
	ip := netip.MustParseAddr("2001:db8::7")
	s.Record([]string{"short.test"}, ip, 0)              // raised to MinTTL
	s.Record([]string{"long.test"}, ip, 48*time.Hour)    // capped to MaxTTL
	s.Record([]string{"mid.test"}, ip, 100*time.Second)  //
	s.Record([]string{"short.test"}, ip, 5*time.Second)  // never shortens
	s.Record([]string{"192.0.2.1", "[::1]"}, ip, 100000) // literals are not names
	steps := []struct {
		after time.Duration
		want  []string
	}{
		{9 * time.Second, []string{"short.test", "long.test", "mid.test"}},
		{1 * time.Second, []string{"long.test", "mid.test"}},
		{90 * time.Second, []string{"long.test"}},
		{time.Hour, nil},
	}
	for _, st := range steps {
		clk.Advance(st.after)
		if got := s.Names(ip); !slices.Equal(got, st.want) {
			t.Fatalf("at +%v: %v, want %v", clk.t.Sub(newClock().t), got, st.want)
		}
	}
	if s.Len() != 0 {
		t.Fatalf("expired entry kept: %d", s.Len())
	}
}

func TestSnoopHoldKeepsNamesForOpenFlow(t *testing.T) {
	clk := newClock()
	s := NewSnoopTable(SnoopOptions{Now: clk.Now, MinTTL: time.Second})
	ip := netip.MustParseAddr("192.0.2.8")
	s.Record([]string{"db.test"}, ip, 30*time.Second)
	release := s.Hold(ip)
	clk.Advance(time.Hour)
	if got := s.Names(ip); !slices.Equal(got, []string{"db.test"}) {
		t.Fatalf("held entry lost its name: %v", got)
	}
	release()
	release() // idempotent
	if got := s.Names(ip); got != nil {
		t.Fatalf("released entry kept expired name: %v", got)
	}
	s.Hold(netip.MustParseAddr("192.0.2.99"))() // unknown address: no-op
}

// TestSnoopKeepsInvalidNames: a name that is not a host name must reach the
// matcher, which denies the flow, rather than vanish and leave the address
// nameless under a deny-by-name rule.
func TestSnoopKeepsInvalidNames(t *testing.T) {
	s := NewSnoopTable(SnoopOptions{})
	ip := netip.MustParseAddr("203.0.113.7")
	s.Record([]string{"a\xff.evil.example"}, ip, time.Minute)
	m := mustCompile(t, "deny tcp evil.example\ndefault allow\n")
	v := m.Verdict(Flow{Proto: TCP, IP: ip, Port: 443, Names: s.Names(ip)})
	if v.Action != Deny {
		t.Fatalf("flow to an address with an invalid name: %v by %v", v.Action, v.Rule)
	}
}

func TestSnoopBounds(t *testing.T) {
	clk := newClock()
	s := NewSnoopTable(SnoopOptions{Now: clk.Now, MaxIPs: 3, MaxNamesPerIP: 2})
	ip := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}) }
	s.Record([]string{"a.test"}, ip(1), time.Hour)
	held := s.Hold(ip(1))
	for i := 2; i <= 5; i++ {
		s.Record([]string{fmt.Sprintf("n%d.test", i)}, ip(i), time.Hour)
	}
	if s.Len() != 3 {
		t.Fatalf("len %d, want 3", s.Len())
	}
	if s.Names(ip(1)) == nil {
		t.Fatal("evicted an address held by an open flow")
	}
	if s.Names(ip(2)) != nil || s.Names(ip(3)) != nil {
		t.Fatal("oldest unheld addresses not evicted")
	}
	held()
	s.Record([]string{"x.test"}, ip(9), 10*time.Minute)
	s.Record([]string{"y.test"}, ip(9), 20*time.Minute)
	s.Record([]string{"z.test"}, ip(9), 30*time.Minute)
	if got := s.Names(ip(9)); !slices.Equal(got, []string{"y.test", "z.test"}) {
		t.Fatalf("per-IP bound kept %v", got)
	}
}

func TestSnoopConcurrent(t *testing.T) {
	s := NewSnoopTable(SnoopOptions{MaxIPs: 64})
	done := make(chan struct{})
	for g := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 2000 {
				ip := netip.AddrFrom4([4]byte{10, byte(g), byte(i >> 8), byte(i)})
				s.Record([]string{"c.test"}, ip, time.Minute)
				rel := s.Hold(ip)
				_ = s.Names(ip)
				rel()
			}
		}()
	}
	for range 4 {
		<-done
	}
	if s.Len() > 64 {
		t.Fatalf("bound exceeded: %d", s.Len())
	}
}
