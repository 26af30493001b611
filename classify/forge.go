package classify

import (
	"net/http"
	"strings"
)

// ForgeService names the git forge a host belongs to: "github" for
// github.com, its subdomains and the githubusercontent.com hosts, "gitlab"
// for gitlab.com, "bitbucket" for bitbucket.org; "" otherwise. host is
// lower-case, without port or trailing dot.
func ForgeService(host string) string {
	under := func(domain string) bool { return host == domain || strings.HasSuffix(host, "."+domain) }
	switch {
	case under("github.com"), host == "githubusercontent.com", strings.HasSuffix(host, "githubusercontent.com"):
		return "github"
	case under("gitlab.com"):
		return "gitlab"
	case under("bitbucket.org"):
		return "bitbucket"
	}
	return ""
}

// Forge classifies a request to a git forge by its method and path (the
// request line only): git's smart HTTP, then REST. GraphQL bodies are
// classified elsewhere; here a GraphQL POST is unknown.
func Forge(service, method, path, rawQuery string) Operation {
	op := Operation{Service: service, Scope: service, Detail: method + " " + path}
	switch {
	case strings.HasSuffix(path, "/info/refs"):
		// The ref advertisement, before a fetch or a push: a read either way.
		op.Class, op.Reason = Read, "smart HTTP ref advertisement"
	case strings.HasSuffix(path, "/git-upload-pack") && method == http.MethodPost:
		op.Class, op.Reason = Read, "smart HTTP fetch (git-upload-pack)"
	case strings.HasSuffix(path, "/git-receive-pack") && method == http.MethodPost:
		op.Class, op.Reason = Write, "smart HTTP push (git-receive-pack)"
	case path == "/graphql" || path == "/api/graphql":
		op.Class, op.Reason = Unknown, "a GraphQL document decides; the request line cannot"
	default:
		op.Class, op.Reason = REST(method)
	}
	return op
}

// REST classifies by method alone: GET, HEAD and OPTIONS read, DELETE
// destroys, every other method writes.
func REST(method string) (Class, string) {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return Read, "REST " + method + " reads"
	case http.MethodDelete:
		return Destructive, "REST DELETE destroys"
	}
	return Write, "REST " + method + " writes"
}
