package firewall

import (
	"container/list"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// SnoopOptions bound a SnoopTable. Zero fields take the defaults.
type SnoopOptions struct {
	// MaxIPs bounds the addresses remembered (default 65536). The least
	// recently recorded address not held by an open flow goes first.
	MaxIPs int
	// MaxNamesPerIP bounds the names kept for one address (default 32); the
	// name closest to expiry goes first.
	MaxNamesPerIP int
	// MinTTL raises short TTLs (default 60 s): a client connects just after
	// resolving, and a TTL-0 answer must still name that connection.
	MinTTL time.Duration
	// MaxTTL caps long TTLs (default 24 h).
	MaxTTL time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// SnoopTable maps IP addresses to the names the VM resolved to them, as seen
// by the gateway's DNS server. The network stack records answers; the network
// stack and the proxy read names back when deciding a flow. Names expire with
// their TTL, except while a flow to the address is open (Hold). Safe for
// concurrent use.
//
// Name rules at the connection layer only see names resolved through the
// gateway: a VM that dials a literal address carries no name, which is why
// a deny-by-name rule belongs together with "default deny".
type SnoopTable struct {
	opts SnoopOptions

	mu      sync.Mutex
	entries map[netip.Addr]*snoopEntry
	lru     *list.List // of *snoopEntry; front is the most recently recorded
}

type snoopEntry struct {
	ip    netip.Addr
	names []snoopName
	holds int
	elem  *list.Element
}

type snoopName struct {
	name    string
	expires time.Time
}

// NewSnoopTable returns an empty table.
func NewSnoopTable(opts SnoopOptions) *SnoopTable {
	if opts.MaxIPs <= 0 {
		opts.MaxIPs = 65536
	}
	if opts.MaxNamesPerIP <= 0 {
		opts.MaxNamesPerIP = 32
	}
	if opts.MinTTL <= 0 {
		opts.MinTTL = 60 * time.Second
	}
	if opts.MaxTTL <= 0 {
		opts.MaxTTL = 24 * time.Hour
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &SnoopTable{opts: opts, entries: map[netip.Addr]*snoopEntry{}, lru: list.New()}
}

// Record notes that names resolved to ip with the given TTL. For a CNAME
// chain, pass the query name and every record owner along the chain: each of
// them maps to the address. Names that are not host names are ignored.
func (t *SnoopTable) Record(names []string, ip netip.Addr, ttl time.Duration) {
	ip = CanonicalIP(ip)
	if !ip.IsValid() {
		return
	}
	ttl = min(max(ttl, t.opts.MinTTL), t.opts.MaxTTL)
	now := t.opts.Now()
	expires := now.Add(ttl)

	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.entries[ip]
	if e == nil {
		t.makeRoom()
		e = &snoopEntry{ip: ip}
		e.elem = t.lru.PushFront(e)
		t.entries[ip] = e
	} else {
		t.lru.MoveToFront(e.elem)
		e.dropExpired(now)
	}
	for _, raw := range names {
		name, lit, ok := canonicalName(raw)
		switch {
		case lit.IsValid():
			// An address is not a name for another address.
		case !ok:
			// Keep the name as it came, so that a flow to this address
			// carries it and is denied as invalid: dropping it would let
			// the flow walk past a deny-by-name rule with no name at all.
			e.add(raw, expires, t.opts.MaxNamesPerIP)
		default:
			e.add(name, expires, t.opts.MaxNamesPerIP)
		}
	}
}

// makeRoom evicts the least recently recorded address that no open flow
// holds, when the table is full. Called with mu held.
func (t *SnoopTable) makeRoom() {
	if len(t.entries) < t.opts.MaxIPs {
		return
	}
	for el := t.lru.Back(); el != nil; el = el.Prev() {
		if e := el.Value.(*snoopEntry); e.holds == 0 {
			t.remove(e)
			return
		}
	}
	// Every entry is held by an open flow: grow past the bound rather than
	// forget a name a live flow is matched by.
}

func (t *SnoopTable) remove(e *snoopEntry) {
	t.lru.Remove(e.elem)
	delete(t.entries, e.ip)
}

func (e *snoopEntry) add(name string, expires time.Time, limit int) {
	for i := range e.names {
		if e.names[i].name == name {
			if expires.After(e.names[i].expires) {
				e.names[i].expires = expires
			}
			return
		}
	}
	if len(e.names) >= limit {
		soonest := 0
		for i := range e.names {
			if e.names[i].expires.Before(e.names[soonest].expires) {
				soonest = i
			}
		}
		e.names = slices.Delete(e.names, soonest, soonest+1)
	}
	e.names = append(e.names, snoopName{name: name, expires: expires})
}

func (e *snoopEntry) dropExpired(now time.Time) {
	if e.holds > 0 {
		return
	}
	e.names = slices.DeleteFunc(e.names, func(n snoopName) bool { return !now.Before(n.expires) })
}

// Names returns the names recorded for ip that have not expired, or every
// recorded name while a flow holds the address. The slice is a copy.
func (t *SnoopTable) Names(ip netip.Addr) []string {
	ip = CanonicalIP(ip)
	now := t.opts.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.entries[ip]
	if e == nil {
		return nil
	}
	e.dropExpired(now)
	if len(e.names) == 0 {
		t.remove(e)
		return nil
	}
	out := make([]string, len(e.names))
	for i, n := range e.names {
		out[i] = n.name
	}
	return out
}

// Hold keeps the names of ip alive while a flow to it is open, as Cilium
// does for FQDN policy: a long connection must not change verdict, or lose
// its names in the event log, because a TTL ran out. Call release once,
// when the flow ends.
func (t *SnoopTable) Hold(ip netip.Addr) (release func()) {
	ip = CanonicalIP(ip)
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.entries[ip]
	if e == nil {
		return func() {}
	}
	e.holds++
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			e.holds--
		})
	}
}

// Len returns the number of addresses in the table.
func (t *SnoopTable) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.entries)
}
