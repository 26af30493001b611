// Command guardd is guard's per-workspace daemon: the VM's network, the
// egress firewall, the intercepting proxy with its guardrails and
// credential swapping, and the control socket, for one agent VM. See
// guardd --help.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"guard"
	"guard/daemon"
	"guard/workspace"
)

const usage = `guardd runs guard for one workspace VM: it loads the workspace profile,
decides every flow against the egress rules, intercepts HTTP(S) with the
workspace CA (created in the state dir on first run), classifies calls to
known services and applies their write policy (asking through guardctl prompt
when the policy says so), swaps the VM's fake credentials for the real ones
toward their hosts, records the security timeline, and serves the control
socket that guardctl talks to.

Usage:
  guardd --profile FILE [--state-dir DIR] [--control SOCK] [--proxy-listen ADDR]
         [--vm LINK | --netns NAME] [--mtu N] [--log-level LEVEL]
  guardd --demo [--state-dir DIR] [--control SOCK] [--proxy-listen ADDR]

Flags:
  --profile FILE     the workspace profile (JSON); relative paths inside it are
                     relative to the file
  --demo             run the demo profile built into guardd instead of --profile
  --state-dir DIR    where the control socket, the event log and the lock live
                     (default $XDG_STATE_HOME/guard/<workspace>, or
                     ~/.local/state/guard/<workspace>); created with mode 0700
  --control SOCK     the control socket (default <state-dir>/control.sock);
                     guardctl finds it with --control or $GUARD_CONTROL
  --proxy-listen ADDR
                     also serve an explicit HTTP proxy (CONNECT and absolute-form
                     requests) on ADDR, a loopback address such as
                     127.0.0.1:3128; clients must trust the workspace CA
                     (guardctl ca export)
  --vm LINK          be the VM's only network: a userspace TCP/IP stack on LINK.
                     The VM is 10.0.2.15/24 with gateway and DNS 10.0.2.2; every
                     flow is decided by the rules, ports 80 and 443 go through
                     the proxy, QUIC is refused unless a rule allows it. LINK:
                       qemu:PATH       a unix stream socket guardd listens on;
                                       QEMU connects with -netdev stream,
                                       server=off,addr.type=unix,addr.path=PATH
                       vfkit:PATH      a unixgram socket (vfkit, and
                                       Virtualization.framework file handles)
                       tap:IFNAME      a TAP device, created if missing (Linux)
                       afpacket:IFNAME the host end of a veth pair (Linux, root)
  --netns NAME       make network namespace NAME for the agent (Linux, root):
                     eth0 at 10.0.2.15/24, default route and DNS through guardd,
                     removed when guardd stops. Then: ip netns exec NAME curl ...
  --mtu N            the VM link's MTU, 576 to 65535, offered to the VM by DHCP
                     (default: the interface's own for afpacket, 65520 for
                     --netns, 1500 for qemu, vfkit and tap). Every flow ends in
                     guardd, so a large MTU costs nothing on the far side
  --log-level LEVEL  debug, info, warn or error (default info); logs go to stderr
  -h, --help         show this help

Signals:
  SIGHUP             re-read the profile and swap in its rules; a profile that
                     does not load changes nothing
  SIGINT, SIGTERM    stop: close the socket, flush the event log, exit 0

Exit status: 0 after a clean stop, 1 on a failure, 2 on a usage error.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("guardd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, "Run guardd --help for usage.\n") }
	profile := fs.String("profile", "", "")
	demo := fs.Bool("demo", false, "")
	stateDir := fs.String("state-dir", "", "")
	controlPath := fs.String("control", "", "")
	proxyListen := fs.String("proxy-listen", "", "")
	vm := fs.String("vm", "", "")
	netns := fs.String("netns", "", "")
	mtu := fs.Uint("mtu", 0, "")
	level := fs.String("log-level", "info", "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "guardd: unexpected argument %q; see guardd --help\n", fs.Arg(0))
		return 2
	}
	if (*profile == "") == !*demo {
		fmt.Fprintln(stderr, "guardd: give exactly one of --profile FILE or --demo; see guardd --help")
		return 2
	}
	if *mtu != 0 && (*mtu < 576 || *mtu > 65535) {
		fmt.Fprintf(stderr, "guardd: --mtu %d: want 576 to 65535\n", *mtu)
		return 2
	}
	if *mtu != 0 && *vm == "" && *netns == "" {
		fmt.Fprintln(stderr, "guardd: --mtu needs --vm or --netns; see guardd --help")
		return 2
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintf(stderr, "guardd: --log-level %q: want debug, info, warn or error\n", *level)
		return 2
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))

	load := func() (*workspace.Profile, error) { return workspace.LoadFile(*profile) }
	if *demo {
		load = func() (*workspace.Profile, error) {
			return workspace.Parse(guard.DemoProfile(), "embedded demo", "")
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	d, err := daemon.New(ctx, daemon.Config{
		LoadProfile: load,
		StateDir:    *stateDir,
		ControlPath: *controlPath,
		ProxyListen: *proxyListen,
		VM:          *vm,
		Netns:       *netns,
		MTU:         uint32(*mtu),
		Logger:      logger,
	})
	if err != nil {
		fmt.Fprintf(stderr, "guardd: %v\n", err)
		return 1
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				logger.Info("SIGHUP: reloading the profile's rules")
				d.Reload(ctx) // logs its own outcome; a failure keeps the old policy
			}
		}
	}()
	if err := d.Run(ctx); err != nil {
		fmt.Fprintf(stderr, "guardd: %v\n", err)
		return 1
	}
	return 0
}
