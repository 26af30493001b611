// Package rules owns guard's pf-style egress rule language: parsing a rules
// file into a Policy, validating every line, and printing the canonical form.
//
// A rules file holds one rule per line:
//
//	action [proto] target[:ports] [methods]
//	default allow|deny
//
// The package is pure: it does no I/O and knows nothing of sockets. The
// firewall package compiles a Policy into a matcher; proxies and the network
// stack never read rule text.
//
// Two properties hold for every policy p and every text x that parses:
//
//	Parse(Format(p)) equals p (ignoring line numbers), and
//	Format(Parse(x)) is a fixed point of Format∘Parse.
//
// Parse reports every bad line, each as "Line N: <message>" naming the bad
// token, so a person can fix a file in one pass.
package rules
