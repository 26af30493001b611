// Package firewall owns guard's decision core for flows: a rules.Policy
// compiled into a Matcher, the Verdict for one flow or one web request, the
// atomically swappable active policy, and the DNS-snoop table that maps the
// IPs a VM connects to back to the names it resolved.
//
// The model is pf's: rules are tried in order and the first that matches
// decides; when none matches, the policy's default decides. A flow matches a
// rule's target when its destination IP, or any of its candidate names (DNS
// snoop, SNI, Host), matches. IPv4-mapped IPv6 addresses and the NAT64
// well-known prefix 64:ff9b::/96 are folded to IPv4 before matching, so an
// IPv4 rule cannot be walked around through an IPv6 spelling.
//
// A Verdict is allow, deny, or intercept. Intercept means the flow may pass
// only through the HTTP proxy, which checks each request's method with the
// same matcher (Flow.Method set). A web rule gives intercept at the
// connection layer; its method list is applied per request.
//
// Nothing here does I/O. The network stack and the proxy ask; the daemon
// records one event per decision.
//
// Matching is indexed so that a decision costs a handful of map lookups
// whatever the policy size: host rules are found by walking the name's
// suffixes, address rules by masking the IP to each prefix length the policy
// uses, and only the few any-target rules are scanned. The lowest-numbered
// candidate that matches wins, which is exactly first-match order.
package firewall
