package workspace

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// RulesTemplate is the commented rules file a new profile starts with.
const RulesTemplate = `# Egress rules for this workspace. The first matching rule wins; the default
# line decides what no rule matches. Apply changes to a running guardd with
#   guardctl rules apply <this file>
#
#   action [proto] target[:ports] [methods]
#
# action   allow | deny
# proto    tcp | udp | web | any (default any); web is HTTP(S) and is
#          intercepted so that its methods can be checked per request
# target   example.com      the name and every subdomain
#          *.example.com    subdomains only
#          192.0.2.0/24     an address or CIDR; IPv6 with ports in brackets:
#                           [2001:db8::/32]:443
#          any              everything
# ports    443 | 80,443 | 8000-8100 | any
# methods  web rules only: GET,POST | read-only | methods GET,POST
#          on allow web: the only methods that pass; on deny web: blocked
#
# Examples:
#   allow tcp api.github.com:443
#   allow web api.example.com GET,POST     # only these verbs reach the site
#   deny  web api.internal PUT,DELETE      # block these verbs, allow the rest
#   deny  udp any:53                       # DNS only through the gateway
#   deny  any 10.0.0.0/8

allow tcp github.com:443
allow tcp api.github.com:443
allow tcp *.githubusercontent.com:443
deny  udp any:53
deny  any 10.0.0.0/8
deny  any 172.16.0.0/12
deny  any 192.168.0.0/16
deny  any 169.254.0.0/16
default deny
`

// Init writes a new profile for workspace name into dir: profile.json, with
// promptOnWrite for every service, and rules.pf from RulesTemplate. It
// refuses to overwrite existing files. It returns the paths written.
func Init(dir, name string) ([]string, error) {
	if !profileNameRE.MatchString(name) {
		return nil, fmt.Errorf("%q is not a valid workspace name (lower-case letters, digits, '.', '_' and '-')", name)
	}
	guardrails := map[string]Mode{}
	for _, s := range Services() {
		guardrails[s] = PromptOnWrite
	}
	on := true
	prof := Profile{
		Name:        name,
		Credentials: []Credential{},
		Guardrails:  guardrails,
		Kubeconfigs: []string{},
		Egress: Egress{
			RulesFile:               "rules.pf",
			TransparentInterception: &on,
			NoMitmDomains:           []string{},
			UpstreamCAs:             []string{},
		},
		DNS:     DNS{Servers: []string{}, Hosts: map[string]string{}},
		Consent: Consent{TimeoutSeconds: 60},
	}
	profJSON, err := json.MarshalIndent(newProfileJSON(prof), "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	files := []struct {
		name string
		data []byte
	}{
		{"profile.json", append(profJSON, '\n')},
		{"rules.pf", []byte(RulesTemplate)},
	}
	for _, f := range files {
		if _, err := os.Lstat(filepath.Join(dir, f.name)); err == nil {
			return nil, fmt.Errorf("%s already exists; remove it or choose another directory", filepath.Join(dir, f.name))
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	var written []string
	for _, f := range files {
		path := filepath.Join(dir, f.name)
		fh, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return written, err
		}
		_, werr := fh.Write(f.data)
		if cerr := fh.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return written, werr
		}
		written = append(written, path)
	}
	// The new profile must load: a template that does not is a bug here,
	// not the user's problem to find later.
	if _, err := LoadFile(filepath.Join(dir, "profile.json")); err != nil {
		return written, fmt.Errorf("the new profile does not load: %w", err)
	}
	return written, nil
}

// profileJSON fixes the field order of a written profile.
type profileJSON struct {
	Name        string          `json:"name"`
	Credentials []Credential    `json:"credentials"`
	Guardrails  map[string]Mode `json:"guardrails"`
	Kubeconfigs []string        `json:"kubeconfigs"`
	Egress      Egress          `json:"egress"`
	DNS         DNS             `json:"dns"`
	Consent     Consent         `json:"consent"`
}

func newProfileJSON(p Profile) profileJSON {
	return profileJSON{p.Name, p.Credentials, p.Guardrails, p.Kubeconfigs, p.Egress, p.DNS, p.Consent}
}
