// Package daemon is guardd: it wires one workspace's parts together and owns
// their life cycle. It loads the profile, takes the state directory (0700)
// and its lock, opens the event log, compiles the policy into the active
// matcher, serves the control socket, and runs the components the later
// layers plug in (the proxy, the network stack) until it is told to stop.
//
// Policy changes (guardctl rules apply, SIGHUP) are validated first, written
// to the event log second, and swapped in atomically last; a failure at any
// step leaves the old policy in force. DecideFlow is the seam through which
// the network stack and the proxy decide flows: one verdict, one event, and
// a deny when the event cannot be written.
package daemon
