package classify

import (
	"net/http"
	"strconv"
	"strings"
)

// Kind is the protocol family of a known service.
type Kind string

const (
	KindForge         Kind = "forge"
	KindAWS           Kind = "aws"
	KindDigitalOcean  Kind = "digitalocean"
	KindRegistry      Kind = "registry"
	KindKubernetes    Kind = "kubernetes"
	KindClickHouse    Kind = "clickhouse"
	KindElasticsearch Kind = "elasticsearch"
	KindMongoDataAPI  Kind = "mongodb-data-api"
	// KindGuessDB is a database host whose kind the profile does not say;
	// the port decides (9200 Elasticsearch, 8123 ClickHouse), else its
	// requests are unknown.
	KindGuessDB Kind = "database"
)

// Route is where a request goes: the protocol to classify it by, the
// write-policy service, and the scope consent grants are kept under.
type Route struct {
	Kind    Kind
	Service string
	Scope   string
}

// Services are the hosts the profile makes known, beyond the built-in
// forges, AWS, DigitalOcean, Docker Hub and ghcr.io.
type Services struct {
	// Kubernetes are API server hosts ("host" or "host:port") from the
	// profile's kubeconfigs.
	Kubernetes []string
	// Registries are extra OCI registry hosts.
	Registries []string
	// Databases maps a database host to its kind (clickhouse,
	// elasticsearch, mongodb); the service is "db:<host>".
	Databases map[string]Kind
}

// builtinRegistries are registries known without configuration.
var builtinRegistries = []string{"registry-1.docker.io", "index.docker.io", "auth.docker.io", "hub.docker.com", "ghcr.io"}

// Route finds the service a request to host:port belongs to. host is
// lower-case without a trailing dot.
func (s *Services) Route(host string, port int) (Route, bool) {
	under := func(domain string) bool { return host == domain || strings.HasSuffix(host, "."+domain) }
	hostPort := host + ":" + strconv.Itoa(port)
	for _, k := range s.Kubernetes {
		if k == host || k == hostPort {
			return Route{Kind: KindKubernetes, Service: "kubernetes", Scope: "kube:" + host}, true
		}
	}
	if kind, ok := s.Databases[host]; ok {
		switch {
		case kind == "mongodb":
			kind = KindMongoDataAPI
		case kind == KindGuessDB && (port == 9200 || port == 9243):
			kind = KindElasticsearch
		case kind == KindGuessDB && (port == 8123 || port == 8443):
			kind = KindClickHouse
		}
		return Route{Kind: kind, Service: "db:" + host, Scope: "db:" + host}, true
	}
	if svc := ForgeService(host); svc != "" {
		return Route{Kind: KindForge, Service: svc, Scope: svc}, true
	}
	switch {
	case under("amazonaws.com") || under("amazonaws.com.cn") || under("api.aws"):
		return Route{Kind: KindAWS, Service: "aws", Scope: "aws"}, true
	case host == "api.digitalocean.com":
		return Route{Kind: KindDigitalOcean, Service: "digitalocean", Scope: "digitalocean"}, true
	case under("data.mongodb-api.com"):
		return Route{Kind: KindMongoDataAPI, Service: "db:" + host, Scope: "db:" + host}, true
	}
	for _, r := range append(builtinRegistries[:len(builtinRegistries):len(builtinRegistries)], s.Registries...) {
		if host == r || hostPort == r {
			scopeHost := host
			if host == "index.docker.io" || host == "auth.docker.io" || host == "hub.docker.com" {
				scopeHost = "registry-1.docker.io"
			}
			return Route{Kind: KindRegistry, Service: "registry", Scope: "docker:" + scopeHost}, true
		}
	}
	return Route{}, false
}

// NeedsBody says whether the classifier for rt reads the request's body
// (up to MaxBody). git-receive-pack is read by ReceivePack instead, which
// streams.
func NeedsBody(rt Route, r *Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return false
	}
	switch rt.Kind {
	case KindForge:
		return ForgeNeedsBody(r)
	case KindAWS:
		return awsNeedsBody(r)
	case KindClickHouse:
		return true
	case KindElasticsearch:
		return esNeedsBody(r)
	case KindDigitalOcean:
		return digitalOceanNeedsBody(r)
	case KindKubernetes:
		return kubeNeedsBody(r)
	}
	return false
}

// IsReceivePack says r is a git push, which ReceivePack classifies.
func IsReceivePack(rt Route, r *Request) bool {
	return rt.Kind == KindForge && r.Method == http.MethodPost && strings.HasSuffix(r.Path, "/git-receive-pack")
}

// Classify classifies a request on its route.
func Classify(rt Route, r *Request) Operation {
	var op Operation
	switch rt.Kind {
	case KindForge:
		op = Forge(rt.Service, r)
	case KindAWS:
		op = AWS(r)
	case KindDigitalOcean:
		op = DigitalOcean(r)
	case KindRegistry:
		op = Registry(r)
	case KindKubernetes:
		op = Kubernetes(r)
	case KindClickHouse:
		op = ClickHouse(r)
	case KindElasticsearch:
		op = Elasticsearch(r)
	case KindMongoDataAPI:
		op = MongoDataAPI(r)
	case KindGuessDB:
		op = Operation{Class: Unknown, Reason: "the profile does not say what database this host runs (name it in a credential's service)"}
	default:
		op = Operation{Class: Unknown, Reason: "no classifier for " + string(rt.Kind)}
	}
	op.Service, op.Scope = rt.Service, rt.Scope
	if op.Detail == "" {
		op.Detail = r.Method + " " + r.Path
	}
	return op
}
