package workspace

import (
	"fmt"
	"net/url"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"

	"guard/classify"
)

// Services are the hosts the profile makes known to the classifiers: the
// API servers of its kubeconfigs, its registry credentials' hosts, and its
// database endpoints (a "db:<host>" guardrail, of the kind a credential
// for that host names, else guessed from the port the request uses).
func (p *Profile) Services() (*classify.Services, error) {
	s := &classify.Services{Databases: map[string]classify.Kind{}}
	for i, path := range p.Kubeconfigs {
		hosts, err := kubeconfigServers(p.Path(path))
		if err != nil {
			return nil, fmt.Errorf("kubeconfigs[%d]: %w", i, err)
		}
		s.Kubernetes = append(s.Kubernetes, hosts...)
	}
	for _, c := range p.Credentials {
		for _, h := range c.Hosts {
			h = strings.ToLower(h)
			switch c.Service {
			case "registry":
				s.Registries = append(s.Registries, h)
			case "clickhouse", "elasticsearch", "mongodb":
				s.Databases[hostOnly(h)] = classify.Kind(c.Service)
			}
		}
	}
	for key := range p.Guardrails {
		host, ok := strings.CutPrefix(key, "db:")
		if !ok {
			continue
		}
		if _, known := s.Databases[host]; !known {
			s.Databases[host] = classify.KindGuessDB
		}
	}
	return s, nil
}

func hostOnly(h string) string {
	if i := strings.LastIndexByte(h, ':'); i > 0 && !strings.Contains(h[i:], "]") {
		return h[:i]
	}
	return h
}

// kubeconfigServers reads the API server hosts ("host:port") of a
// kubeconfig's clusters.
func kubeconfigServers(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var kc struct {
		Clusters []struct {
			Cluster struct {
				Server string `yaml:"server"`
			} `yaml:"cluster"`
		} `yaml:"clusters"`
	}
	if err := yaml.Unmarshal(b, &kc); err != nil {
		return nil, fmt.Errorf("%s is not a kubeconfig: %w", path, err)
	}
	var out []string
	for _, c := range kc.Clusters {
		u, err := url.Parse(c.Cluster.Server)
		if err != nil || u.Host == "" {
			continue
		}
		host := strings.ToLower(u.Hostname())
		port := u.Port()
		if port == "" {
			port = "443"
		}
		out = append(out, host+":"+port)
	}
	return out, nil
}
