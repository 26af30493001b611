package firewall

import (
	"sync"
	"sync/atomic"
)

// Active holds the matcher in force. Swapping is atomic: a decision that
// loaded the old matcher finishes on it, and every decision that starts
// after Swap returns sees the new one. Holders of long-lived flows watch
// Changed to re-decide them.
type Active struct {
	m atomic.Pointer[Matcher]

	mu      sync.Mutex
	changed chan struct{} // closed at the next Swap
}

// NewActive returns a holder with m in force.
func NewActive(m *Matcher) *Active {
	a := &Active{changed: make(chan struct{})}
	a.m.Store(m)
	return a
}

// Load returns the matcher in force.
func (a *Active) Load() *Matcher { return a.m.Load() }

// Swap puts m in force and returns the matcher it replaced.
func (a *Active) Swap(m *Matcher) *Matcher {
	a.mu.Lock()
	defer a.mu.Unlock()
	old := a.m.Swap(m)
	close(a.changed)
	a.changed = make(chan struct{})
	return old
}

// Changed returns a channel that is closed when the matcher is next
// swapped. Take the channel before loading the matcher, so that no swap
// falls between the two.
func (a *Active) Changed() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.changed
}
