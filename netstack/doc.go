// Package netstack owns the VM's network: the gateway's services and, as
// they land, the userspace TCP/IP stack, the VM link endpoints and the
// TCP/UDP forwarders that divert ports 80 and 443 to the proxy.
//
// What is here so far is the gateway's DNS server (DNSGateway): it forwards
// the VM's queries to the host's resolvers, hardens the answers, and records
// every name-to-address mapping in the firewall's snoop table, so that flows
// to those addresses are decided by name. It decides nothing itself: the
// firewall's matcher says which names may resolve to internal addresses.
package netstack
