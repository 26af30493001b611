package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/miekg/dns"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"guard/audit"
	"guard/classify"
	"guard/consent"
	"guard/control"
	"guard/firewall"
	"guard/internal/hostaddr"
	"guard/netstack"
	"guard/proxy"
	"guard/rules"
	"guard/workspace"
)

// Component is a long-running part of guardd, such as the proxy or the
// network stack. It is started once the policy and the event log are ready
// and must return when ctx ends. A component that fails stops guardd: the
// VM must not be left with a half-working way out.
type Component interface {
	Name() string
	Run(ctx context.Context) error
}

// Config assembles a daemon.
type Config struct {
	// LoadProfile reads and validates the profile; it is called at start
	// and again on every reload.
	LoadProfile func() (*workspace.Profile, error)
	// StateDir defaults to the workspace's default state directory.
	StateDir string
	// ControlPath defaults to <StateDir>/control.sock.
	ControlPath string
	Logger      *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
	// EventSink replaces the event file, for tests.
	EventSink audit.Sink
	// ProxyListen is the explicit proxy's address (guardd --proxy-listen);
	// empty for none. It must be a loopback address: the proxy has no
	// authentication of its own.
	ProxyListen string
	// VM attaches the VM's link (guardd --vm), e.g. "afpacket:veth0";
	// empty for none.
	VM string
	// Netns makes a network namespace for the agent, wired to guardd's
	// stack (guardd --netns); it replaces VM.
	Netns string
	// MTU is the VM link's MTU (guardd --mtu); 0 for the link's default:
	// the interface's own for afpacket, NetnsMTU for Netns, 1500 otherwise.
	MTU uint32
	// Components are started by Run.
	Components []Component
}

// Daemon is one workspace's guardd.
type Daemon struct {
	cfg         Config
	logger      *slog.Logger
	name        string // the workspace; a reload may not change it
	stateDir    string
	controlPath string
	eventPath   string
	lock        *os.File
	started     time.Time

	active  *firewall.Active
	snoop   *firewall.SnoopTable
	events  *audit.Log
	ca      *proxy.Authority
	proxy   *proxy.Proxy
	broker  *consent.Broker
	store   *workspace.Store
	swapper *proxy.Swapper
	// hostAddrs are the host's own addresses, shared by the proxy and the
	// stack: flows to them need a rule that names them.
	hostAddrs *hostaddr.Set

	// mu serializes policy changes, so each summary compares against the
	// policy it replaced.
	mu           sync.Mutex
	profile      *workspace.Profile
	services     *classify.Services // the classifiers' hosts, from profile
	classifier   classify.Cache     // parsed GraphQL documents, across requests
	rulesSource  string
	rulesChanged time.Time

	compMu     sync.Mutex
	compStates map[string]string

	proxyAddr string // the explicit proxy's address, when listening
	netns     *vmNamespace
}

// New loads the profile, prepares the state directory, takes the workspace
// lock, opens the event log and compiles the policy. Nothing listens yet.
func New(ctx context.Context, cfg Config) (*Daemon, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	prof, err := cfg.LoadProfile()
	if err != nil {
		return nil, err
	}
	d := &Daemon{cfg: cfg, logger: cfg.Logger, name: prof.Name, profile: prof, started: cfg.Now(), compStates: map[string]string{}}
	for _, w := range prof.Warnings {
		d.logger.Warn("profile: " + w)
	}
	d.stateDir = cfg.StateDir
	if d.stateDir == "" {
		if d.stateDir, err = workspace.DefaultStateDir(prof.Name); err != nil {
			return nil, err
		}
	}
	if d.stateDir, err = filepath.Abs(d.stateDir); err != nil {
		return nil, err
	}
	if err := workspace.PrepareStateDir(d.stateDir); err != nil {
		return nil, err
	}
	if d.lock, err = lockStateDir(d.stateDir); err != nil {
		return nil, err
	}
	d.controlPath = cfg.ControlPath
	if d.controlPath == "" {
		d.controlPath = filepath.Join(d.stateDir, "control.sock")
	}
	sink := cfg.EventSink
	d.eventPath = filepath.Join(d.stateDir, "events.jsonl")
	if sink == nil {
		fs, err := audit.OpenFile(d.eventPath, 0, 0)
		if err != nil {
			d.unlock()
			return nil, err
		}
		sink = fs
	}
	d.events = audit.New(prof.Name, sink, audit.Options{Now: cfg.Now, Logger: d.logger})
	d.snoop = firewall.NewSnoopTable(firewall.SnoopOptions{Now: cfg.Now})
	d.hostAddrs = &hostaddr.Set{}
	d.broker = consent.NewBroker(consent.Config{Timeout: prof.Consent.Timeout(), Record: consentRecorder{d.events}})
	if d.store, err = workspace.OpenStore(ctx, prof, d.stateDir); err != nil {
		d.close()
		return nil, err
	}
	for _, c := range d.store.Credentials() {
		if _, err := c.Real(); err != nil {
			d.logger.Warn("a credential's secret is not available; requests that need it are refused", "err", err)
		}
	}
	d.swapper = proxy.NewSwapper(proxyCredentials(d.store), d.store.Tags, d.events, useApprover{d})
	d.swapper.BlockUntracked = prof.Egress.UntrackedSecrets == "block"
	// The compromise mark survives a restart: only a person clears it.
	markPath := filepath.Join(d.stateDir, compromiseFile)
	if b, err := os.ReadFile(markPath); err == nil {
		d.swapper.MarkCompromised(strings.TrimSpace(string(b)))
		d.logger.Warn("the workspace is marked compromised; guardctl compromise clear after looking", "reason", strings.TrimSpace(string(b)))
	}
	d.swapper.OnCompromise = func(reason string) {
		if err := os.WriteFile(markPath, []byte(reason+"\n"), 0o600); err != nil {
			d.logger.Error("the compromise mark could not be kept on disk", "err", err)
		}
	}
	d.cfg.Components = append(d.cfg.Components, namedRunner{"credentials", func(ctx context.Context) error {
		d.store.Refresh(ctx) // command secrets with refreshSeconds are re-read
		<-ctx.Done()
		return nil
	}})

	m, err := compile(prof, prof.Policy)
	if err != nil {
		d.close()
		return nil, err
	}
	if d.services, err = prof.Services(); err != nil {
		d.close()
		return nil, err
	}
	// The first policy is on record before any flow is decided by it.
	if err := d.events.Emit(ctx, policyEvent("start", m.Policy(), control.ApplyResult{})); err != nil {
		d.close()
		return nil, fmt.Errorf("cannot write the event log, refusing to start: %w", err)
	}
	d.active = firewall.NewActive(m)
	d.rulesSource, d.rulesChanged = "profile "+prof.Source, cfg.Now()
	if err := d.buildProxy(prof); err != nil {
		d.close()
		return nil, err
	}
	if cfg.Netns != "" {
		if cfg.VM != "" {
			d.close()
			return nil, errors.New("--netns and --vm are exclusive: --netns makes its own link")
		}
		if d.netns, err = createNamespace(cfg.Netns, cmp.Or(cfg.MTU, NetnsMTU)); err != nil {
			d.close()
			return nil, err
		}
		d.cfg.VM = "afpacket:" + d.netns.hostIf
	}
	if d.cfg.VM != "" {
		if err := d.buildNetstack(ctx, prof); err != nil {
			d.close()
			return nil, err
		}
	}
	return d, nil
}

// buildProxy creates the workspace CA (on first run) and the proxy, and
// adds the proxy's servers to the components.
func (d *Daemon) buildProxy(prof *workspace.Profile) error {
	var err error
	if d.ca, err = proxy.LoadOrCreateCA(d.stateDir, prof.Name, 0, d.cfg.Now); err != nil {
		return err
	}
	roots, err := prof.UpstreamRoots()
	if err != nil {
		return err
	}
	d.proxy, err = proxy.New(proxy.Config{
		CA: d.ca, Policy: d.active, Events: d.events, Snoop: d.snoop,
		UpstreamRoots: roots, StaticHosts: prof.DNS.Hosts, NoMitm: prof.Egress.NoMitmDomains,
		HostAddrs: d.hostAddrs, Guardrails: guardrails{d}, Credentials: d.swapper, Logger: d.logger,
	})
	if err != nil {
		return err
	}
	d.cfg.Components = append([]Component{namedRunner{"intercept", d.proxy.Run}}, d.cfg.Components...)
	if d.cfg.ProxyListen != "" {
		ln, err := listenLoopback(d.cfg.ProxyListen)
		if err != nil {
			return err
		}
		d.proxyAddr = ln.Addr().String()
		d.cfg.Components = append(d.cfg.Components, namedRunner{"proxy " + d.proxyAddr, func(ctx context.Context) error {
			return d.proxy.ServeExplicit(ctx, ln)
		}})
	}
	return nil
}

// listenLoopback listens for the explicit proxy, refusing other addresses:
// anyone who can reach the proxy can use the workspace's way out.
func listenLoopback(addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--proxy-listen %q: %w", addr, err)
	}
	if ip, err := netip.ParseAddr(host); err != nil || !ip.Unmap().IsLoopback() {
		if host != "localhost" {
			return nil, fmt.Errorf("--proxy-listen %q: the explicit proxy has no authentication, so it only listens on loopback (127.0.0.1 or [::1])", addr)
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--proxy-listen: %w", err)
	}
	return ln, nil
}

// VMGateway is the gateway and DNS address the VM sees, and its subnet;
// the VM is 10.0.2.15 (the QEMU user-network layout).
func VMGateway() netip.Prefix { return netip.MustParsePrefix("10.0.2.2/24") }

// buildNetstack attaches the VM's link and starts the userspace stack.
func (d *Daemon) buildNetstack(ctx context.Context, prof *workspace.Profile) error {
	kind, arg, ok := strings.Cut(d.cfg.VM, ":")
	if !ok || arg == "" {
		return fmt.Errorf("--vm %q: want qemu:PATH, vfkit:PATH, tap:IFNAME or afpacket:IFNAME", d.cfg.VM)
	}
	upstreams := prof.DNS.Servers
	if len(upstreams) == 0 {
		conf, err := dns.ClientConfigFromFile("/etc/resolv.conf")
		if err != nil {
			return fmt.Errorf("no dns.servers in the profile and no host resolver: %w", err)
		}
		for _, s := range conf.Servers {
			upstreams = append(upstreams, net.JoinHostPort(s, conf.Port))
		}
	}
	gw := netstack.NewDNSGateway(netstack.DNSConfig{Upstreams: upstreams, Static: prof.DNS.Hosts, Snoop: d.snoop, Policy: d.active, Logger: d.logger})
	stackCfg := netstack.Config{Gateway: VMGateway(), Decide: d, Names: d.snoop, Proxy: d.proxy,
		DNS: gw, Intercept: prof.Egress.Intercepts(), HostAddrs: d.hostAddrs, Policy: d.active, Events: d.events, Logger: d.logger}
	if li := prof.LocalInference; li != nil {
		a, err := resolveLocalInference(ctx, li.Host)
		if err != nil {
			return fmt.Errorf("localInference.host: %w", err)
		}
		stackCfg.LocalInference = netip.AddrPortFrom(a, uint16(li.Port))
		if _, err := netip.ParseAddr(li.Host); err != nil {
			stackCfg.LocalInferenceName = li.Host
		}
	}
	if p, err := netstack.NewHostPinger(); err == nil {
		stackCfg.Pinger = p
	} else {
		d.logger.Info("the VM's pings will go unanswered", "err", err)
	}
	var run func(ctx context.Context) error
	switch kind {
	case "afpacket", "tap":
		open := netstack.OpenAFPacket
		switch {
		case kind == "tap":
			open = netstack.OpenTAP
		case d.netns != nil:
			open = func(ifname string, mtu uint32) (stack.LinkEndpoint, func() error, error) {
				return netstack.OpenAFPacketIn(d.netns.LinkPath(), ifname, mtu)
			}
		}
		run = func(ctx context.Context) error {
			mtu := d.cfg.MTU
			if kind == "tap" {
				mtu = cmp.Or(mtu, defaultMTU)
			}
			ep, closeLink, err := open(arg, mtu) // afpacket: 0 is the interface's
			if err != nil {
				return err
			}
			defer closeLink()
			st, err := netstack.New(stackCfg, ep)
			if err != nil {
				return err
			}
			<-ctx.Done()
			st.Close()
			return nil
		}
	case "qemu":
		ln, err := listenUnix(arg)
		if err != nil {
			return fmt.Errorf("--vm %s: %w", d.cfg.VM, err)
		}
		run = func(ctx context.Context) error {
			go func() { <-ctx.Done(); ln.Close() }()
			// One VM at a time; a reboot reconnects.
			for {
				c, err := ln.Accept()
				if err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return err
				}
				if err := serveFrames(ctx, netstack.NewQEMUConn(c), stackCfg, cmp.Or(d.cfg.MTU, defaultMTU)); err != nil {
					d.logger.Info("VM link ended", "link", d.cfg.VM, "err", err)
				}
			}
		}
	case "vfkit":
		os.Remove(arg)
		c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: arg, Net: "unixgram"})
		if err != nil {
			return fmt.Errorf("--vm %s: %w", d.cfg.VM, err)
		}
		os.Chmod(arg, 0o600)
		run = func(ctx context.Context) error {
			defer os.Remove(arg)
			return serveFrames(ctx, netstack.NewVfkitConn(c), stackCfg, cmp.Or(d.cfg.MTU, defaultMTU))
		}
	default:
		return fmt.Errorf("--vm %q: link kind %q is not supported (qemu:PATH, vfkit:PATH, tap:IFNAME or afpacket:IFNAME)", d.cfg.VM, kind)
	}
	d.cfg.Components = append(d.cfg.Components, namedRunner{"vm " + d.cfg.VM, run})
	return nil
}

// MTUs of the VM link. A VM whose own MTU is larger than the link's still
// works (the handshake's MSS settles it); DHCP offers the link's.
const (
	defaultMTU = 1500
	// NetnsMTU is the veth's for --netns: every flow ends in guardd, so the
	// far side never sees it, and large frames halve the stack's per-packet
	// work (see README, Performance).
	NetnsMTU = 65520
)

// serveFrames runs a stack on one frame link until the link or ctx ends.
func serveFrames(ctx context.Context, fc netstack.FrameConn, cfg netstack.Config, mtu uint32) error {
	ep := netstack.NewFrameEndpoint(fc, mtu, netstack.GatewayMAC())
	st, err := netstack.New(cfg, ep)
	if err != nil {
		fc.Close()
		return err
	}
	defer st.Close()
	return ep.Run(ctx)
}

// listenUnix listens on a unix stream socket for the VM's link, 0600.
func listenUnix(path string) (net.Listener, error) {
	if st, err := os.Lstat(path); err == nil && st.Mode()&os.ModeSocket != 0 {
		os.Remove(path)
	}
	old := syscall.Umask(0o077)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// namedRunner adapts a Run func to Component.
type namedRunner struct {
	name string
	run  func(context.Context) error
}

func (n namedRunner) Name() string                  { return n.name }
func (n namedRunner) Run(ctx context.Context) error { return n.run(ctx) }

// Proxy is the interception proxy; the network stack hands it diverted
// connections.
func (d *Daemon) Proxy() *proxy.Proxy { return d.proxy }

// CA describes the workspace CA for guardctl ca.
func (d *Daemon) CA() control.CAInfo {
	return control.CAInfo{Path: filepath.Join(d.stateDir, proxy.CACertFile), PEM: string(d.ca.CertificatePEM())}
}

// compile builds the matcher for a policy with the profile's exemptions.
func compile(prof *workspace.Profile, p *rules.Policy) (*firewall.Matcher, error) {
	var ex []firewall.Exemption
	if li := prof.LocalInference; li != nil {
		r, err := localInferenceRule(li)
		if err != nil {
			return nil, fmt.Errorf("localInference: %w", err)
		}
		ex = append(ex, firewall.Exemption{Rule: r, Origin: "localInference"})
	}
	// QUIC would carry HTTP past the proxy; refused unless the user's rules
	// allow it, so clients fall back to TCP where the proxy sees them.
	ex = append(ex, firewall.Exemption{Origin: "quic", Last: true, Rule: rules.Rule{Action: rules.Deny, Proto: rules.UDP,
		Target: rules.Target{Kind: rules.AnyTarget}, Ports: rules.PortSet{{Lo: 443, Hi: 443}}}})
	return firewall.Compile(p, ex...), nil
}

// resolveLocalInference finds the address of the host's model server, once
// at start: a literal address as itself, a name (such as localhost) by the
// host's resolver, IPv4 first since the VM's network is IPv4.
func resolveLocalInference(ctx context.Context, host string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap().WithZone(""), nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%s does not resolve: %w", host, err)
	}
	slices.SortStableFunc(addrs, func(a, b netip.Addr) int {
		switch a4, b4 := a.Unmap().Is4(), b.Unmap().Is4(); {
		case a4 == b4:
			return 0
		case a4:
			return -1
		}
		return 1
	})
	return addrs[0].Unmap(), nil
}

// localInferenceRule is "allow tcp HOST:PORT" for the host's model server.
func localInferenceRule(li *workspace.LocalInference) (rules.Rule, error) {
	r := rules.Rule{Action: rules.Allow, Proto: rules.TCP, Ports: rules.PortSet{{Lo: uint16(li.Port), Hi: uint16(li.Port)}}}
	if a, err := netip.ParseAddr(li.Host); err == nil {
		a = a.Unmap().WithZone("")
		r.Target = rules.Target{Kind: rules.Prefix, Prefix: netip.PrefixFrom(a, a.BitLen())}
		return r, nil
	}
	h, err := rules.NormalizeHost(li.Host)
	if err != nil {
		return r, err
	}
	r.Target = rules.Target{Kind: rules.Domain, Host: h}
	return r, nil
}

// lockStateDir takes an exclusive lock so two guardd never share a
// workspace's state.
func lockStateDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, "guardd.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		pid, _ := os.ReadFile(path)
		f.Close()
		return nil, fmt.Errorf("another guardd (pid %s) is running with state dir %s", string(pid), dir)
	}
	f.Truncate(0)
	f.WriteAt([]byte(strconv.Itoa(os.Getpid())), 0)
	return f, nil
}

func (d *Daemon) unlock() {
	if d.lock != nil {
		d.lock.Close()
		d.lock = nil
	}
}

func (d *Daemon) close() {
	if d.netns != nil {
		d.netns.remove()
		d.netns = nil
	}
	if d.events != nil {
		d.events.Close()
	}
	d.unlock()
}

// Run serves the control socket and runs the components until ctx ends or
// a component fails, then shuts down: the socket is removed, the event log
// closed and the lock released.
func (d *Daemon) Run(ctx context.Context) error {
	defer d.close()
	// The listener removes its socket file when it closes.
	ln, err := control.Listen(d.controlPath)
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	srv := control.NewServer(d, d.logger)
	wg.Go(func() {
		if err := srv.Serve(ctx, ln); err != nil {
			cancel(fmt.Errorf("control socket: %w", err))
		}
	})
	for _, c := range d.cfg.Components {
		d.setState(c.Name(), "running")
		wg.Go(func() {
			err := c.Run(ctx)
			if ctx.Err() == nil {
				if err == nil {
					err = errors.New("stopped unexpectedly")
				}
				d.setState(c.Name(), "failed: "+err.Error())
				cancel(fmt.Errorf("%s: %w", c.Name(), err))
				return
			}
			d.setState(c.Name(), "stopped")
		})
	}
	d.logger.Info("guardd ready", "workspace", d.name, "control", d.controlPath,
		"state_dir", d.stateDir, "rules", len(d.active.Load().Policy().Rules), "default", d.active.Load().Policy().Default.String())
	<-ctx.Done()
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	d.logger.Info("guardd stopped", "workspace", d.name)
	return nil
}

func (d *Daemon) setState(name, state string) {
	d.compMu.Lock()
	defer d.compMu.Unlock()
	d.compStates[name] = state
}

// Reload re-reads the profile and swaps in its rules (SIGHUP). A profile
// that does not load changes nothing.
func (d *Daemon) Reload(ctx context.Context) error {
	prof, err := d.cfg.LoadProfile()
	if err != nil {
		d.logger.Error("reload refused; the active policy is unchanged", "err", err)
		return err
	}
	for _, w := range prof.Warnings {
		d.logger.Warn("profile: " + w)
	}
	res, err := d.swap(ctx, prof, prof.Policy, "SIGHUP", "profile "+prof.Source)
	if err != nil {
		d.logger.Error("reload refused; the active policy is unchanged", "err", err)
		return err
	}
	d.logger.Info("rules reloaded", "rules", res.Rules, "default", res.Default, "added", len(res.Added), "removed", len(res.Removed))
	return nil
}

// ApplyRules parses text and swaps it in (guardctl rules apply).
func (d *Daemon) ApplyRules(ctx context.Context, text []byte, source string) (control.ApplyResult, error) {
	p, err := rules.Parse(text)
	if err != nil {
		return control.ApplyResult{}, err
	}
	if source == "" {
		source = "guardctl"
	}
	res, err := d.swap(ctx, nil, p, "guardctl rules apply", source)
	if err == nil {
		d.logger.Info("rules applied", "source", source, "rules", res.Rules, "default", res.Default, "added", len(res.Added), "removed", len(res.Removed))
	}
	return res, err
}

// swap records and installs a new policy, with a new profile (a reload) or
// with the current one (prof nil: an apply). The change is written to the
// event log first; if that fails the old policy stays. Everything happens
// under mu, so a reload and an apply cannot interleave and bring back a
// stale profile's exemptions.
func (d *Daemon) swap(ctx context.Context, prof *workspace.Profile, p *rules.Policy, how, source string) (control.ApplyResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if prof == nil {
		prof = d.profile
	}
	if prof.Name != d.name {
		return control.ApplyResult{}, fmt.Errorf("the profile now names workspace %q, not %q; restart guardd to switch workspaces", prof.Name, d.name)
	}
	m, err := compile(prof, p)
	if err != nil {
		return control.ApplyResult{}, err
	}
	services, err := prof.Services()
	if err != nil {
		return control.ApplyResult{}, err
	}
	res := summarize(d.active.Load().Policy(), p)
	ev := policyEvent(how, p, res)
	ev.Reason = source
	if err := d.events.Emit(ctx, ev); err != nil {
		return control.ApplyResult{}, fmt.Errorf("the change could not be written to the event log, so it was not made: %w", err)
	}
	d.active.Swap(m)
	if d.proxy != nil {
		d.proxy.PolicyChanged()
	}
	d.profile, d.services = prof, services
	d.rulesSource, d.rulesChanged = source, d.cfg.Now()
	return res, nil
}

func policyEvent(how string, p *rules.Policy, res control.ApplyResult) audit.Event {
	return audit.Event{Type: audit.TypePolicyChange, Source: how, Rules: len(p.Rules), Default: p.Default.String(),
		Added: len(res.Added), Removed: len(res.Removed)}
}

// DecideFlow decides a flow against the active policy and records one
// egress.firewall event. If the event cannot be written the flow is denied.
// This is the seam the network stack and the proxy decide through.
func (d *Daemon) DecideFlow(ctx context.Context, f firewall.Flow, layer string) firewall.Verdict {
	v := d.active.Load().Verdict(f)
	ev := audit.FlowEvent(layer, f, v)
	if err := d.events.Emit(ctx, ev); err != nil {
		return firewall.Verdict{Action: firewall.Deny, Rule: firewall.RuleRef{Origin: "failClosed", Text: "the event log cannot be written"}}
	}
	d.logger.InfoContext(ctx, "egress.firewall", "action", ev.Action, "layer", layer, "proto", ev.Proto,
		"host", ev.Host, "ip", ev.IP, "port", ev.Port, "method", ev.Method, "rule", v.Rule.String())
	return v
}

// Consent is the consent broker the control socket's prompters attach to.
func (d *Daemon) Consent() *consent.Broker { return d.broker }

// currentProfile is the profile in force (a reload replaces it), with the
// classifiers' hosts made from it.
func (d *Daemon) currentProfile() (*workspace.Profile, *classify.Services) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.profile, d.services
}

// Active is the policy holder the proxy and network stack read.
func (d *Daemon) Active() *firewall.Active { return d.active }

// Snoop is the DNS-snoop table shared by the network stack and the proxy.
func (d *Daemon) Snoop() *firewall.SnoopTable { return d.snoop }

// Events is the event log.
func (d *Daemon) Events() *audit.Log { return d.events }

// Check decides a flow without recording it (guardctl rules check).
// The host's own addresses are marked as the stack and proxy mark them.
func (d *Daemon) Check(f firewall.Flow) firewall.Verdict {
	if f.IP.IsValid() {
		f.HostLocal = f.HostLocal || d.hostAddrs.Contains(f.IP)
	}
	return d.active.Load().Verdict(f)
}

// ActiveRules shows the policy in force.
func (d *Daemon) ActiveRules() control.RulesView {
	m := d.active.Load()
	d.mu.Lock()
	defer d.mu.Unlock()
	v := control.RulesView{Text: rules.Format(m.Policy()), Source: d.rulesSource, Changed: d.rulesChanged}
	for _, e := range m.Exemptions() {
		where := "first"
		if e.Last {
			where = "last"
		}
		v.Exemptions = append(v.Exemptions, where+" ("+e.Origin+"): "+rules.FormatRule(&e.Rule))
	}
	return v
}

// Status describes the daemon.
func (d *Daemon) Status() control.Status {
	p := d.active.Load().Policy()
	d.mu.Lock()
	s := control.Status{
		Workspace: d.profile.Name, PID: os.Getpid(), Started: d.started, Profile: d.profile.Source,
		StateDir: d.stateDir, Control: d.controlPath, EventLog: d.eventPath, Events: d.events.Total(),
		Rules: len(p.Rules), Default: p.Default.String(), RulesSource: d.rulesSource, RulesChanged: d.rulesChanged,
		Warnings: d.profile.Warnings, Components: []control.ComponentStatus{},
	}
	d.mu.Unlock()
	d.compMu.Lock()
	defer d.compMu.Unlock()
	for _, c := range d.cfg.Components {
		s.Components = append(s.Components, control.ComponentStatus{Name: c.Name(), State: d.compStates[c.Name()]})
	}
	return s
}
