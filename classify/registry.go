package classify

import (
	"net/http"
	"strings"
)

// Registry classifies the OCI distribution API. Repository names have
// slashes, so routes are found from the right: .../manifests/<ref>,
// .../blobs/uploads/..., .../blobs/<digest>, .../tags/list. Pulls, HEADs,
// tag lists, the catalog and token requests read; uploads and manifest PUTs
// write; a DELETE of a manifest or blob destroys (a manifest DELETE removes
// every tag on that digest).
func Registry(r *Request) Operation {
	op := Operation{}
	p := r.Path
	route := registryRoute(p)
	switch {
	case r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodOptions:
		op.Class, op.Reason = Read, "a registry read"
	case strings.HasSuffix(p, "/token"):
		// Token endpoints take POSTs for OAuth.
		op.Class, op.Reason = Read, "a registry token request"
	case !strings.HasPrefix(p, "/v2/"):
		op.Class, op.Reason = REST(r.Method)
	case r.Method == http.MethodDelete && route == "manifests":
		op.Class, op.Reason = Destructive, "deletes a manifest, and every tag on its digest"
	case r.Method == http.MethodDelete && route == "uploads":
		op.Class, op.Reason = Write, "cancels an upload"
	case r.Method == http.MethodDelete && route == "blobs":
		op.Class, op.Reason = Destructive, "deletes a blob"
	case route == "uploads":
		op.Class, op.Reason = Write, "uploads a blob"
	case r.Method == http.MethodPut && route == "manifests":
		op.Class, op.Reason = Write, "pushes a manifest"
	default:
		op.Class, op.Reason = REST(r.Method)
	}
	if repo, ref, ok := registryTarget(p); ok {
		op.Detail = r.Method + " " + repo + "@" + ref
	}
	return op
}

// registryRoute names a distribution path's route, found from the right
// since repository names may contain "blobs" or "manifests" themselves:
// "manifests", "blobs", "uploads" or "".
func registryRoute(p string) string {
	m, b := strings.LastIndex(p, "/manifests/"), strings.LastIndex(p, "/blobs/")
	switch {
	case m < 0 && b < 0:
		return ""
	case m > b:
		return "manifests"
	case strings.HasPrefix(p[b+len("/blobs/"):], "uploads"):
		return "uploads"
	}
	return "blobs"
}

// registryTarget reads the repository and reference of a manifest or blob
// path, from the right.
func registryTarget(p string) (repo, ref string, ok bool) {
	kind := "/" + registryRoute(p) + "/"
	if kind == "/uploads/" {
		kind = "/blobs/"
	}
	if i := strings.LastIndex(p, kind); i > len("/v2") {
		return p[len("/v2/"):i], p[i+len(kind):], true
	}
	return "", "", false
}
