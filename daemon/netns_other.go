//go:build !linux

package daemon

import "errors"

type vmNamespace struct{ hostIf string }

func (ns *vmNamespace) LinkPath() string { return "" }

func createNamespace(name string, mtu uint32) (*vmNamespace, error) {
	return nil, errors.New("--netns needs Linux network namespaces")
}

func (ns *vmNamespace) remove() {}
