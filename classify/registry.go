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
	switch {
	case r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodOptions:
		op.Class, op.Reason = Read, "a registry read"
	case !strings.HasPrefix(p, "/v2/"):
		// Token endpoints (/token, /v2/token on some) take POSTs for OAuth.
		if strings.HasSuffix(p, "/token") {
			op.Class, op.Reason = Read, "a registry token request"
		} else {
			op.Class, op.Reason = REST(r.Method)
		}
	case r.Method == http.MethodDelete && strings.Contains(p, "/manifests/"):
		op.Class, op.Reason = Destructive, "deletes a manifest, and every tag on its digest"
	case r.Method == http.MethodDelete && strings.Contains(p, "/blobs/uploads/"):
		op.Class, op.Reason = Write, "cancels an upload"
	case r.Method == http.MethodDelete && strings.Contains(p, "/blobs/"):
		op.Class, op.Reason = Destructive, "deletes a blob"
	case strings.Contains(p, "/blobs/uploads"):
		op.Class, op.Reason = Write, "uploads a blob"
	case r.Method == http.MethodPut && strings.Contains(p, "/manifests/"):
		op.Class, op.Reason = Write, "pushes a manifest"
	case strings.HasSuffix(p, "/token"):
		op.Class, op.Reason = Read, "a registry token request"
	default:
		op.Class, op.Reason = REST(r.Method)
	}
	if repo, ref, ok := registryTarget(p); ok {
		op.Detail = r.Method + " " + repo + "@" + ref
	}
	return op
}

// registryTarget reads the repository and reference of a manifest or blob
// path, from the right.
func registryTarget(p string) (repo, ref string, ok bool) {
	for _, kind := range []string{"/manifests/", "/blobs/"} {
		if i := strings.LastIndex(p, kind); i > len("/v2") {
			return p[len("/v2/"):i], p[i+len(kind):], true
		}
	}
	return "", "", false
}
