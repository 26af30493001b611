package classify

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
)

// kubeRequest is a Kubernetes API path taken apart the way the API server
// does: /api/v1/... or /apis/<group>/<version>/..., then an optional
// namespaces/<ns>, then resource, name and subresource.
type kubeRequest struct {
	resource, name, subresource, namespace string
	isResource                             bool
}

func parseKubePath(path string) kubeRequest {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	var k kubeRequest
	// Servers behind a path prefix (Rancher's /k8s/clusters/<id>/...) put
	// the API at any depth: take the first api/<version> or
	// apis/<group>/<version>.
	found := false
	for i := range parts {
		if parts[i] == "api" && i+1 < len(parts) && strings.HasPrefix(parts[i+1], "v") {
			parts, found = parts[i+2:], true
			break
		}
		if parts[i] == "apis" && i+2 < len(parts) && strings.HasPrefix(parts[i+2], "v") {
			parts, found = parts[i+3:], true
			break
		}
	}
	if !found {
		return k // discovery, /version, /healthz, /openapi...
	}
	if len(parts) >= 1 && parts[0] == "watch" {
		parts = parts[1:] // the old /watch/ prefix
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		k.namespace = parts[1]
		parts = parts[2:]
	}
	if len(parts) == 0 {
		return k
	}
	k.isResource = true
	k.resource = parts[0]
	if len(parts) >= 2 {
		k.name = parts[1]
	}
	if len(parts) >= 3 {
		k.subresource = parts[2]
	}
	return k
}

// kubeRemote are subresources that run code or open a channel into a pod
// or node: writes whatever the method (kubectl >= 1.30 execs over a
// WebSocket GET).
var kubeRemote = map[string]bool{"exec": true, "attach": true, "portforward": true, "proxy": true}

// kubeReviews are the kinds whose create only asks a question.
var kubeReviews = map[string]bool{"selfsubjectaccessreviews": true, "selfsubjectrulesreviews": true,
	"tokenreviews": true, "subjectaccessreviews": true, "localsubjectaccessreviews": true, "selfsubjectreviews": true}

// Kubernetes classifies an API server request by its verb: get, list and
// watch read; create, update and patch write; delete and deletecollection
// destroy, as does an eviction. exec, attach, portforward and proxy are
// writes whatever the method; dryRun=All and the access and token reviews
// read; serviceaccounts/token (a new token) writes.
func Kubernetes(r *Request) Operation {
	k := parseKubePath(r.Path)
	op := Operation{}
	verb := kubeVerb(r.Method, k, r.Query.Get("watch"))
	op.Detail = r.Method + " " + r.Path
	switch {
	case !k.isResource:
		op.Class, op.Reason = REST(r.Method)
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			op.Reason = "API discovery"
		}
		return op
	case kubeRemote[k.subresource] || (k.resource == "nodes" && k.subresource == "proxy"):
		op.Class, op.Reason = Write, k.subresource+" into "+k.resource+"/"+k.name+" (a channel into the cluster)"
		return op
	case k.subresource == "token" && k.resource == "serviceaccounts":
		op.Class, op.Reason = Write, "mints a service account token"
		return op
	case kubeReviews[k.resource] && r.Method == http.MethodPost:
		op.Class, op.Reason = Read, "asks an access or token review"
		return op
	}
	dryRun := false
	for _, v := range r.Query["dryRun"] {
		dryRun = dryRun || v == "All"
	}
	switch verb {
	case "get", "list", "watch":
		op.Class = Read
	case "delete", "deletecollection":
		op.Class = Destructive
	case "create":
		op.Class = Write
		if k.subresource == "eviction" {
			op.Class, verb = Destructive, "evict"
		}
	default:
		op.Class = Write
	}
	op.Reason = verb + " " + k.resource
	if k.subresource != "" {
		op.Reason += "/" + k.subresource
	}
	if dryRun && r.Method == http.MethodDelete && len(r.Body) > 0 {
		// A DELETE's body is its DeleteOptions, and the API server takes
		// them over the query string.
		dryRun = !r.Truncated && bodyDryRunAll(r.Body)
	}
	if dryRun && op.Class != Read {
		op.Class, op.Reason = Read, op.Reason+" with dryRun=All"
	}
	return op
}

// bodyDryRunAll says a DeleteOptions body asks for dryRun All; the API
// server's JSON keys are case-sensitive, so only "dryRun" counts.
func bodyDryRunAll(body []byte) bool {
	var opts map[string]json.RawMessage
	if json.Unmarshal(body, &opts) != nil {
		return false
	}
	var modes []string
	if json.Unmarshal(opts["dryRun"], &modes) != nil {
		return false
	}
	return slices.Contains(modes, "All")
}

func kubeNeedsBody(r *Request) bool {
	return r.Method == http.MethodDelete && r.Query.Has("dryRun")
}

func kubeVerb(method string, k kubeRequest, watch string) string {
	switch method {
	case http.MethodGet, http.MethodHead:
		switch {
		case watch == "true" || watch == "1":
			return "watch"
		case k.name == "":
			return "list"
		}
		return "get"
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		if k.name == "" {
			return "deletecollection"
		}
		return "delete"
	}
	return strings.ToLower(method)
}
