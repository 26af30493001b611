package classify

import (
	"bytes"
	"encoding/json"
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

// Forge classifies a request to a git forge: git's smart HTTP, GraphQL,
// then REST. A git-receive-pack body is classified by ReceivePack, which
// streams; the caller fills Body for the requests ForgeNeedsBody names.
func Forge(service string, r *Request) Operation {
	op := Operation{Service: service, Scope: service, Detail: r.Method + " " + r.Path}
	path := r.Path
	switch {
	case strings.HasSuffix(path, "/info/refs"):
		// The ref advertisement, before a fetch or a push: a read either way.
		op.Class, op.Reason = Read, "smart HTTP ref advertisement"
	case strings.HasSuffix(path, "/git-upload-pack") && r.Method == http.MethodPost:
		op.Class, op.Reason = Read, "smart HTTP fetch (git-upload-pack)"
	case strings.HasSuffix(path, "/git-receive-pack") && r.Method == http.MethodPost:
		op.Class, op.Reason = Write, "smart HTTP push (git-receive-pack)"
	case isGraphQL(path) && (r.Method == http.MethodPost || r.Method == http.MethodGet):
		op.Class, op.Reason = Read, "a GraphQL request without a document"
		if r.Method == http.MethodPost {
			op.Class, op.Reason = graphQL(r.Body, r.Truncated, r.cache.summaries)
		}
		// A document in the URL counts too: Rails takes it over the body's.
		if c, w, ok := graphqlURL(r.Query, r.cache.summaries); ok && (worst(op.Class, c) != op.Class || r.Method == http.MethodGet) {
			op.Class, op.Reason = worst(op.Class, c), w
		}
	case r.Method == http.MethodPatch && strings.Contains(path, "/git/refs/"):
		op.Class, op.Reason = refUpdate(r.Body, r.Truncated)
	default:
		op.Class, op.Reason = REST(r.Method)
	}
	return op
}

func isGraphQL(path string) bool { return path == "/graphql" || path == "/api/graphql" }

// ForgeNeedsBody says which forge requests are classified by their body.
func ForgeNeedsBody(r *Request) bool {
	return (isGraphQL(r.Path) && r.Method == http.MethodPost) ||
		(r.Method == http.MethodPatch && strings.Contains(r.Path, "/git/refs/"))
}

// refUpdate classifies GitHub's PATCH /repos/{o}/{r}/git/refs/{ref}: a
// write, destructive with "force": true.
func refUpdate(body []byte, truncated bool) (Class, string) {
	// The exact key only: GitHub reads "force", not "Force".
	var req map[string]json.RawMessage
	if truncated || json.Unmarshal(body, &req) != nil {
		return Unknown, "a ref update whose body cannot be read"
	}
	switch f := string(bytes.TrimSpace(req["force"])); f {
	case "", "false", "null":
		return Write, "a ref update without force"
	case "true", `"true"`:
		return Destructive, "a forced ref update"
	default:
		return Unknown, "a ref update whose force is " + f
	}
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
