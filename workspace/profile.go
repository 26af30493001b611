package workspace

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"guard/rules"
)

// MaxProfileBytes bounds the profile file, which is read whole.
const MaxProfileBytes = 4 << 20

// Mode is a service's write policy (DESIGN.md §Write policy).
type Mode string

const (
	Off           Mode = "off"
	PromptOnWrite Mode = "promptOnWrite"
	Destructive   Mode = "destructive"
	ReadOnly      Mode = "readOnly"
)

// Valid reports whether m is one of the four modes.
func (m Mode) Valid() bool {
	switch m {
	case Off, PromptOnWrite, Destructive, ReadOnly:
		return true
	}
	return false
}

// Services that take a write policy; databases use "db:<host>".
func Services() []string {
	return []string{"github", "gitlab", "bitbucket", "aws", "digitalocean", "registry", "kubernetes"}
}

// credentialServices are the kinds a credential may be.
func credentialServices() []string {
	return append(Services(), "postgres", "mysql", "mongodb", "clickhouse", "elasticsearch", "http")
}

// Profile is one workspace's configuration (DESIGN.md §Profile).
type Profile struct {
	Name           string          `json:"name"`
	Credentials    []Credential    `json:"credentials"`
	Guardrails     map[string]Mode `json:"guardrails"`
	Kubeconfigs    []string        `json:"kubeconfigs"`
	Egress         Egress          `json:"egress"`
	LocalInference *LocalInference `json:"localInference"`
	DNS            DNS             `json:"dns"`
	Consent        Consent         `json:"consent"`

	// Source is the file the profile was read from, or a label such as
	// "embedded demo".
	Source string `json:"-"`
	// Policy is the parsed egress rules.
	Policy *rules.Policy `json:"-"`
	// Warnings are configuration problems that do not stop guardd, such as
	// a write policy with nothing to apply to.
	Warnings []string `json:"-"`

	dir string // base for relative paths; "" when there is none
}

// Credential is a real secret the proxy injects in place of its fake.
type Credential struct {
	ID           string   `json:"id"`
	Title        string   `json:"title"`
	Service      string   `json:"service"`
	Hosts        []string `json:"hosts"`
	Secret       Secret   `json:"secret"`
	AskBeforeUse bool     `json:"askBeforeUse"`
	// Headers are custom request headers that carry the credential (an
	// API key header), beside Authorization.
	Headers []string `json:"headers,omitempty"`
}

// Secret says where a credential's real value comes from; exactly one source
// is set.
type Secret struct {
	Env     string   `json:"env,omitempty"`
	File    string   `json:"file,omitempty"`
	Command []string `json:"command,omitempty"`
	// Value is an inline secret, for tests only.
	Value string `json:"value,omitempty"`
	// RefreshSeconds re-runs Command on this interval (0: read once).
	RefreshSeconds int `json:"refreshSeconds,omitempty"`
}

// Egress is the firewall and interception configuration.
type Egress struct {
	// Rules is inline rules text; RulesFile names a rules file instead.
	Rules     string `json:"rules,omitempty"`
	RulesFile string `json:"rulesFile,omitempty"`
	// TransparentInterception diverts ports 80 and 443 into the proxy;
	// true when absent.
	TransparentInterception *bool    `json:"transparentInterception"`
	NoMitmDomains           []string `json:"noMitmDomains"`
	UpstreamCAs             []string `json:"upstreamCAs"`
	// UntrackedSecrets is what a real-looking secret guard did not issue
	// (an AKIA key, a ghp_ token, a private key) on the wire does: "flag"
	// (the default: an event) or "block" (451).
	UntrackedSecrets string `json:"untrackedSecrets,omitempty"`
}

// Intercepts reports whether transparent interception is on.
func (e Egress) Intercepts() bool {
	return e.TransparentInterception == nil || *e.TransparentInterception
}

// LocalInference is the host's model endpoint, always reachable.
type LocalInference struct {
	Host string `json:"host"`
	Port int    `json:"port"`
}

// DNS configures the gateway resolver.
type DNS struct {
	Servers []string          `json:"servers"`
	Hosts   map[string]string `json:"hosts"`
}

// Consent configures prompts.
type Consent struct {
	TimeoutSeconds int `json:"timeoutSeconds"`
}

// Timeout is the prompt timeout, 60 s when unset.
func (c Consent) Timeout() time.Duration {
	if c.TimeoutSeconds == 0 {
		return 60 * time.Second
	}
	return time.Duration(c.TimeoutSeconds) * time.Second
}

// Mode returns the write policy for a service scope ("github", "db:host").
// Services the profile does not name are off, as is every service when the
// guardrails field is missing.
func (p *Profile) Mode(service string) Mode {
	if m, ok := p.Guardrails[service]; ok {
		return m
	}
	return Off
}

// UpstreamRoots is the pool the proxy verifies upstream servers with: the
// system roots plus the profile's upstreamCAs.
func (p *Profile) UpstreamRoots() (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil {
		return nil, fmt.Errorf("system roots: %w", err)
	}
	for i, ca := range p.Egress.UpstreamCAs {
		pem, err := os.ReadFile(p.Path(ca))
		if err != nil {
			return nil, fmt.Errorf("egress.upstreamCAs[%d]: %w", i, err)
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("egress.upstreamCAs[%d]: %s holds no PEM certificate", i, p.Path(ca))
		}
	}
	return pool, nil
}

// Path resolves a path from the profile: relative paths are relative to the
// profile file's directory.
func (p *Profile) Path(name string) string {
	if filepath.IsAbs(name) || p.dir == "" {
		return name
	}
	return filepath.Join(p.dir, name)
}

// LoadFile reads and validates a profile file.
func LoadFile(path string) (*Profile, error) {
	data, err := readLimited(path, MaxProfileBytes)
	if err != nil {
		return nil, fmt.Errorf("profile: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("profile: %w", err)
	}
	return Parse(data, abs, filepath.Dir(abs))
}

// readLimited reads a whole file, refusing one larger than limit.
func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return data, nil
}

// Parse decodes and validates profile JSON. source names it in errors; dir
// is the base for relative paths, or "" when the profile has no directory
// (the embedded demo), in which case relative paths are an error.
func Parse(data []byte, source, dir string) (*Profile, error) {
	p := &Profile{Source: source, dir: dir}
	if err := decodeStrict(data, p); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	if errs := p.validate(); len(errs) > 0 {
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = source + ": " + e.Error()
		}
		return nil, &ValidationError{Errors: errs, text: strings.Join(msgs, "\n")}
	}
	return p, nil
}

// ValidationError lists every invalid field of a profile.
type ValidationError struct {
	Errors []*FieldError
	text   string
}

func (e *ValidationError) Error() string { return e.text }

var (
	profileNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
	credIDRE      = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)
)

func (p *Profile) validate() []*FieldError {
	var errs []*FieldError
	bad := func(path, format string, args ...any) { errs = append(errs, fieldErr(path, format, args...)) }
	warn := func(path, format string, args ...any) {
		p.Warnings = append(p.Warnings, path+": "+fmt.Sprintf(format, args...))
	}

	switch {
	case p.Name == "":
		bad("name", "missing: every profile needs a workspace name")
	case !profileNameRE.MatchString(p.Name):
		bad("name", "%q is not a valid workspace name (lower-case letters, digits, '.', '_' and '-', starting with a letter or digit)", p.Name)
	}

	ids := map[string]int{}
	for i := range p.Credentials {
		c := &p.Credentials[i]
		at := fmt.Sprintf("credentials[%d]", i)
		switch {
		case c.ID == "":
			bad(at+".id", "missing")
		case !credIDRE.MatchString(c.ID):
			bad(at+".id", "%q is not a valid id (letters, digits, '.', '_' and '-')", c.ID)
		default:
			if j, dup := ids[c.ID]; dup {
				bad(at+".id", "%q is already used by credentials[%d]", c.ID, j)
			}
			ids[c.ID] = i
		}
		if c.Title == "" {
			c.Title = c.ID
		}
		if !slices.Contains(credentialServices(), c.Service) {
			bad(at+".service", "unknown service %q (want one of %s)", c.Service, strings.Join(credentialServices(), ", "))
		}
		if len(c.Hosts) == 0 {
			bad(at+".hosts", "missing: a credential is only ever sent to its hosts")
		}
		for j, h := range c.Hosts {
			n, err := rules.NormalizeHost(h)
			if err != nil {
				bad(fmt.Sprintf("%s.hosts[%d]", at, j), "%v", err)
				continue
			}
			c.Hosts[j] = n
		}
		for j, h := range c.Headers {
			if !rules.IsToken(h) {
				bad(fmt.Sprintf("%s.headers[%d]", at, j), "%q is not a header name", h)
			}
		}
		s := &c.Secret
		sources := 0
		for _, set := range []bool{s.Env != "", s.File != "", len(s.Command) > 0, s.Value != ""} {
			if set {
				sources++
			}
		}
		if sources != 1 {
			bad(at+".secret", "set exactly one of env, file, command or value")
		}
		if s.File != "" {
			if err := p.checkRelative(s.File); err != nil {
				bad(at+".secret.file", "%v", err)
			}
		}
		if len(s.Command) > 0 && s.Command[0] == "" {
			bad(at+".secret.command[0]", "empty program name")
		}
		if s.RefreshSeconds < 0 || (s.RefreshSeconds > 0 && len(s.Command) == 0) {
			bad(at+".secret.refreshSeconds", "only for command secrets, and not negative")
		}
		if s.Value != "" {
			warn(at+".secret.value", "inline secrets are for tests only; use env, file or command")
		}
	}

	// Keys are normalized ("db:CH.Internal." is "db:ch.internal"), so
	// that a lookup by the canonical scope finds them; two spellings of
	// one scope are an error rather than a coin toss.
	guardrails := make(map[string]Mode, len(p.Guardrails))
	spelledAs := map[string]string{}
	for _, key := range slices.Sorted(maps.Keys(p.Guardrails)) {
		mode := p.Guardrails[key]
		at := fmt.Sprintf("guardrails[%q]", key)
		if !mode.Valid() {
			bad(at, "unknown mode %q (want off, promptOnWrite, destructive or readOnly)", mode)
		}
		canon := key
		switch {
		case slices.Contains(Services(), key):
		case strings.HasPrefix(key, "db:"):
			host := strings.TrimPrefix(key, "db:")
			if host == "" {
				warn(at, "a database policy with no host applies to nothing")
				continue
			}
			if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
				canon = "db:" + a.Unmap().WithZone("").String()
			} else if h, err := rules.NormalizeHost(host); err == nil {
				canon = "db:" + h
			} else {
				bad(at, "%v", err)
				continue
			}
		default:
			bad(at, "unknown service (want one of %s, or db:<host>)", strings.Join(Services(), ", "))
			continue
		}
		if first, dup := spelledAs[canon]; dup {
			bad(at, "the same scope as guardrails[%q]", first)
			continue
		}
		spelledAs[canon] = key
		guardrails[canon] = mode
	}
	if p.Guardrails != nil {
		p.Guardrails = guardrails
	}
	if p.Mode("kubernetes") != Off && len(p.Kubeconfigs) == 0 {
		warn(`guardrails["kubernetes"]`, "set to %s but the profile lists no kubeconfigs, so it applies to nothing", p.Mode("kubernetes"))
	}
	for i, k := range p.Kubeconfigs {
		if err := p.checkFile(k); err != nil {
			bad(fmt.Sprintf("kubeconfigs[%d]", i), "%v", err)
		}
	}

	errs = append(errs, p.validateEgress()...)
	if u := p.Egress.UntrackedSecrets; u != "" && u != "flag" && u != "block" {
		bad("egress.untrackedSecrets", "%q: want flag or block", u)
	}

	if li := p.LocalInference; li != nil {
		if li.Host == "" {
			bad("localInference.host", "missing")
		} else if _, err := netip.ParseAddr(li.Host); err != nil {
			if _, err := rules.NormalizeHost(li.Host); err != nil {
				bad("localInference.host", "%v", err)
			}
		}
		if li.Port < 1 || li.Port > 65535 {
			bad("localInference.port", "%d out of range (1-65535)", li.Port)
		}
	}

	for i, s := range p.DNS.Servers {
		at := fmt.Sprintf("dns.servers[%d]", i)
		if a, err := netip.ParseAddr(s); err == nil {
			p.DNS.Servers[i] = netip.AddrPortFrom(a, 53).String()
			continue
		}
		ap, err := netip.ParseAddrPort(s)
		if err != nil || ap.Port() == 0 {
			bad(at, "%q is not an IP address or IP:port", s)
			continue
		}
		p.DNS.Servers[i] = ap.String()
	}
	if len(p.DNS.Hosts) > 0 {
		hosts := make(map[string]string, len(p.DNS.Hosts))
		for _, name := range slices.Sorted(maps.Keys(p.DNS.Hosts)) {
			ip := p.DNS.Hosts[name]
			at := fmt.Sprintf("dns.hosts[%q]", name)
			n, err := rules.NormalizeHost(name)
			if err != nil {
				bad(at, "%v", err)
				continue
			}
			if _, dup := hosts[n]; dup {
				bad(at, "the same name as another entry (names are compared case-insensitively, without a trailing dot)")
				continue
			}
			a, err := netip.ParseAddr(ip)
			if err != nil {
				bad(at, "%q is not an IP address", ip)
				continue
			}
			hosts[n] = a.Unmap().String()
		}
		p.DNS.Hosts = hosts
	}

	if t := p.Consent.TimeoutSeconds; t < 0 || t > 3600 {
		bad("consent.timeoutSeconds", "%d out of range (1-3600; 0 means the default, 60)", t)
	}
	slices.SortFunc(errs, func(a, b *FieldError) int { return strings.Compare(a.Path, b.Path) })
	slices.Sort(p.Warnings)
	return errs
}

func (p *Profile) validateEgress() []*FieldError {
	var errs []*FieldError
	e := &p.Egress
	text := e.Rules
	at := "egress.rules"
	switch {
	case e.Rules != "" && e.RulesFile != "":
		return []*FieldError{fieldErr("egress", "set rules or rulesFile, not both")}
	case e.RulesFile != "":
		at = "egress.rulesFile"
		if err := p.checkRelative(e.RulesFile); err != nil {
			return []*FieldError{fieldErr(at, "%v", err)}
		}
		b, err := ReadRulesFile(p.Path(e.RulesFile))
		if err != nil {
			return []*FieldError{{Path: at, Err: err}}
		}
		text = string(b)
	}
	pol, err := rules.ParseString(text)
	if err != nil {
		var perr *rules.ParseError
		if errors.As(err, &perr) {
			for _, l := range perr.Lines() {
				errs = append(errs, fieldErr(at, "%s", l))
			}
		} else {
			errs = append(errs, &FieldError{Path: at, Err: err})
		}
	}
	p.Policy = pol
	for i, d := range e.NoMitmDomains {
		n, err := rules.NormalizeHost(d)
		if err != nil {
			errs = append(errs, fieldErr(fmt.Sprintf("egress.noMitmDomains[%d]", i), "%v", err))
			continue
		}
		e.NoMitmDomains[i] = n
	}
	for i, ca := range e.UpstreamCAs {
		at := fmt.Sprintf("egress.upstreamCAs[%d]", i)
		if err := p.checkFile(ca); err != nil {
			errs = append(errs, fieldErr(at, "%v", err))
			continue
		}
		pem, err := os.ReadFile(p.Path(ca))
		if err != nil {
			errs = append(errs, fieldErr(at, "%v", err))
			continue
		}
		if !x509.NewCertPool().AppendCertsFromPEM(pem) {
			errs = append(errs, fieldErr(at, "%s holds no PEM certificate", p.Path(ca)))
		}
	}
	return errs
}

// checkRelative refuses relative paths when the profile has no directory.
func (p *Profile) checkRelative(name string) error {
	if name == "" {
		return errors.New("empty path")
	}
	if !filepath.IsAbs(name) && p.dir == "" {
		return fmt.Errorf("relative path %q in a profile that has no directory", name)
	}
	return nil
}

// checkFile checks that a path from the profile names a readable file.
func (p *Profile) checkFile(name string) error {
	if err := p.checkRelative(name); err != nil {
		return err
	}
	st, err := os.Stat(p.Path(name))
	if err != nil {
		return err
	}
	if st.IsDir() {
		return fmt.Errorf("%s is a directory, want a file", p.Path(name))
	}
	return nil
}

// MaxRulesBytes bounds a rules file.
const MaxRulesBytes = 16 << 20

// ReadRulesFile reads a rules file, refusing one larger than MaxRulesBytes.
func ReadRulesFile(path string) ([]byte, error) { return readLimited(path, MaxRulesBytes) }
