package firewall

import "sync/atomic"

// Active holds the matcher in force. Swapping is atomic: a decision that
// loaded the old matcher finishes on it, and every decision that starts
// after Store returns sees the new one. Nothing is restarted.
type Active struct {
	m atomic.Pointer[Matcher]
}

// NewActive returns a holder with m in force.
func NewActive(m *Matcher) *Active {
	a := &Active{}
	a.m.Store(m)
	return a
}

// Load returns the matcher in force.
func (a *Active) Load() *Matcher { return a.m.Load() }

// Swap puts m in force and returns the matcher it replaced.
func (a *Active) Swap(m *Matcher) *Matcher { return a.m.Swap(m) }
