package classify

import (
	"encoding/json"
	"net/http"
	"strings"
)

// DigitalOcean classifies api.digitalocean.com by the REST rule, and
// besides: a DELETE by tag_name (a bulk delete), the droplet actions
// rebuild and restore (which wipe the disk), and the
// destroy_with_associated_resources paths are destructive.
func DigitalOcean(r *Request) Operation {
	op := Operation{}
	switch {
	case strings.Contains(r.Path, "/destroy_with_associated_resources"):
		op.Class, op.Reason = Destructive, "destroys a droplet with its resources"
	case r.Method == http.MethodDelete && r.Query.Has("tag_name"):
		op.Class, op.Reason = Destructive, "a bulk delete by tag"
	case r.Method == http.MethodPost && strings.HasSuffix(r.Path, "/actions"):
		var a struct {
			Type string `json:"type"`
		}
		switch {
		case r.Truncated || json.Unmarshal(r.Body, &a) != nil:
			op.Class, op.Reason = Unknown, "a droplet action whose body cannot be read"
		case a.Type == "rebuild" || a.Type == "restore":
			op.Class, op.Reason = Destructive, "droplet action "+a.Type+" replaces the disk"
		default:
			op.Class, op.Reason = Write, "droplet action "+a.Type
		}
		op.Detail = r.Method + " " + r.Path + " (" + a.Type + ")"
	default:
		op.Class, op.Reason = REST(r.Method)
	}
	return op
}

func digitalOceanNeedsBody(r *Request) bool {
	return r.Method == http.MethodPost && strings.HasSuffix(r.Path, "/actions")
}
