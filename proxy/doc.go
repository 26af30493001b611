// Package proxy owns guard's HTTP(S) interception: the workspace CA and the
// leaf certificates it signs, the TLS front that reads a whole ClientHello
// and decides by SNI, the explicit proxy listener (CONNECT and absolute-form
// requests, through goproxy) and the transparent entry the network stack
// hands diverted connections to, and the request pipeline both share.
//
// The model:
//
//	client conn ─▶ front: TLS? read ClientHello, decide at layer "sni"
//	   ├─ pass-through host, no web rule ─▶ splice to upstream (still under tcp rules)
//	   └─ otherwise terminate TLS with a leaf for the SNI ─▶ net/http server
//	        (HTTP/1.1, or HTTP/2 by ALPN) ─▶ pipeline, per request:
//	           Host vs SNI vs CONNECT target (domain fronting) ─▶ web method rules
//	           ─▶ guardrails hook ─▶ credentials hook ─▶ upstream (verified TLS)
//
// Decisions only tighten as a connection reveals more (firewall.Stricter):
// the names a client offers in SNI and Host are its own to choose, so they
// can narrow what the connection layer allowed, never widen it. Every
// decision is one egress.firewall event, and a decision that cannot be
// recorded is a deny.
//
// Framing is the standard library's: the decrypted side is served by
// net/http (and x/net/http2 for h2), and requests go upstream through
// httputil.ReverseProxy over an http.Transport that verifies TLS against the
// system roots plus the profile's, ignores proxy environment variables, and
// dials only addresses the rules allow. goproxy's own MITM loop and its raw
// HTTP/2 relay are not used.
package proxy
