// Package netstack owns the VM's network: a userspace TCP/IP stack (gVisor's
// tcpip) on the VM's link, answering as the gateway for every address, so
// that the VM has no way out but through it.
//
// The model: every frame the VM sends lands in Stack. A new TCP or UDP flow
// (or ICMP echo session) is described as a firewall.Flow, with the names
// the VM resolved for its destination, and handed to a Decider; netstack
// decides nothing itself. A denied TCP flow gets a RST, a denied UDP flow
// ICMP port unreachable, a denied ping "administratively prohibited".
// Allowed TCP to ports 80 and 443 goes to the proxy (Transparent), other
// flows are dialled from the host and spliced, UDP through a per-flow
// socket. The open flows are kept (openflows.go) and decided again when the
// policy changes; those the new policy denies are cut.
//
// One concern per file:
//   - stack.go: the stack, its tuning, and the TCP and UDP forwarders;
//   - frames.go, afpacket_linux.go, tap_linux.go: the links (QEMU stream,
//     vfkit datagrams, AF_PACKET on a veth, TAP);
//   - dns.go: the gateway's DNS server, which forwards to the host's
//     resolvers, hardens the answers and records them in the snoop table;
//   - dhcp.go: the gateway's DHCP server (one VM, one address);
//   - icmp.go, ping.go: echo forwarding, answered only when the destination
//     answered a real ping from the host;
//   - openflows.go: the live flows and their re-decision.
//
// IPv6 is refused deliberately: the stack has no IPv6 protocol, so IPv6
// frames from the VM are dropped and can never go around the rules.
package netstack
