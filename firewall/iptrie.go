package firewall

import (
	"math/bits"
	"net/netip"
)

// ipTrie is a path-compressed binary trie of prefixes. A lookup visits only
// the prefixes that contain the address (plus branch nodes), so its cost
// grows with the trie's depth, not with the number of distinct prefix
// lengths in the policy. Addresses are 128-bit keys; IPv4 sits in the top 32
// bits of its own trie.
type ipTrie struct {
	root *trieNode
}

type trieNode struct {
	key   key128
	bits  uint8
	rules []int32 // ascending; empty for branch-only nodes
	child [2]*trieNode
}

type key128 struct{ hi, lo uint64 }

func keyOf(a netip.Addr) key128 {
	if a.Is4() {
		b := a.As4()
		return key128{hi: uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32}
	}
	b := a.As16()
	var k key128
	for i := range 8 {
		k.hi = k.hi<<8 | uint64(b[i])
		k.lo = k.lo<<8 | uint64(b[8+i])
	}
	return k
}

// masked keeps the first n bits of k.
func (k key128) masked(n uint8) key128 {
	switch {
	case n == 0:
		return key128{}
	case n < 64:
		return key128{hi: k.hi &^ (1<<(64-n) - 1)}
	case n == 64:
		return key128{hi: k.hi}
	case n < 128:
		return key128{hi: k.hi, lo: k.lo &^ (1<<(128-n) - 1)}
	}
	return k
}

// bit returns bit i (0 is the most significant) of k.
func (k key128) bit(i uint8) int {
	if i < 64 {
		return int(k.hi >> (63 - i) & 1)
	}
	return int(k.lo >> (127 - i) & 1)
}

// commonLen is the length of the common leading bits of a and b, at most
// limit.
func commonLen(a, b key128, limit uint8) uint8 {
	var n int
	if x := a.hi ^ b.hi; x != 0 {
		n = bits.LeadingZeros64(x)
	} else {
		n = 64 + bits.LeadingZeros64(a.lo^b.lo)
	}
	return uint8(min(n, int(limit)))
}

func (t *ipTrie) insert(p netip.Prefix, idx int32) {
	k, n := keyOf(p.Addr()).masked(uint8(p.Bits())), uint8(p.Bits())
	slot := &t.root
	for {
		cur := *slot
		if cur == nil {
			*slot = &trieNode{key: k, bits: n, rules: []int32{idx}}
			return
		}
		common := commonLen(cur.key, k, min(cur.bits, n))
		switch {
		case common == cur.bits && common == n:
			cur.rules = append(cur.rules, idx)
			return
		case common == cur.bits:
			slot = &cur.child[k.bit(cur.bits)]
		case common == n:
			// The new prefix contains cur: it goes above it.
			nn := &trieNode{key: k, bits: n, rules: []int32{idx}}
			nn.child[cur.key.bit(n)] = cur
			*slot = nn
			return
		default:
			glue := &trieNode{key: k.masked(common), bits: common}
			glue.child[cur.key.bit(common)] = cur
			glue.child[k.bit(common)] = &trieNode{key: k, bits: n, rules: []int32{idx}}
			*slot = glue
			return
		}
	}
}

// walk calls fn with the rule list of every prefix that contains the
// address, shortest first. width is 32 for IPv4 and 128 for IPv6.
func (t *ipTrie) walk(a key128, width uint8, s *search) {
	for n := t.root; n != nil; {
		if a.masked(n.bits) != n.key {
			return
		}
		if len(n.rules) > 0 {
			s.list(n.rules)
		}
		if n.bits >= width {
			return
		}
		n = n.child[a.bit(n.bits)]
	}
}
