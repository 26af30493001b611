//go:build !linux

package hostaddr

import "net/netip"

// localPrefixes: outside Linux the interface addresses are all there is.
func localPrefixes() ([]netip.Prefix, error) { return nil, nil }
