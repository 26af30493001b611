package classify

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
)

// esReadEndpoints are the endpoints a POST reads through.
var esReadEndpoints = map[string]bool{"_search": true, "_msearch": true, "_count": true, "_mget": true,
	"_field_caps": true, "_sql": true, "_explain": true, "_validate": true, "_terms_enum": true, "_eql": true,
	"_pit": true, "_render": true, "_analyze": true, "_async_search": true, "_knn_search": true, "_mvt": true}

// Elasticsearch classifies the Elasticsearch REST API: GET and HEAD read,
// as do POSTs to the search and analysis endpoints and scrolls; DELETE and
// _delete_by_query destroy, as does a _bulk body with a delete action;
// the rest writes. Closing a scroll or a point in time is a read.
func Elasticsearch(r *Request) Operation {
	op := Operation{}
	segs := strings.Split(strings.Trim(r.Path, "/"), "/")
	// The endpoint is the last segment that starts with an underscore:
	// /_all/_delete_by_query is a delete by query, not an "_all" call.
	endpoint, next := "", ""
	for i, s := range segs {
		if strings.HasPrefix(s, "_") {
			endpoint, next = s, ""
			if i+1 < len(segs) {
				next = segs[i+1]
			}
		}
	}
	scroll := endpoint == "_search" && next == "scroll"
	switch {
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
		op.Class, op.Reason = Read, "an Elasticsearch read"
	case r.Method == http.MethodDelete && (scroll || endpoint == "_pit"):
		op.Class, op.Reason = Read, "closes a scroll or point in time"
	case r.Method == http.MethodDelete:
		op.Class, op.Reason = Destructive, "DELETE destroys"
	case endpoint == "_delete_by_query" || endpoint == "_reset":
		op.Class, op.Reason = Destructive, endpoint+" destroys"
	case endpoint == "_bulk":
		op.Class, op.Reason = bulk(r.Body, r.Truncated)
	case endpoint == "_update_by_query":
		op.Class, op.Reason = scriptClass(r.Body, r.Truncated, "_update_by_query")
	case endpoint == "_aliases":
		op.Class, op.Reason = Write, "_aliases writes"
		if r.Truncated || bytes.Contains(r.Body, []byte("remove_index")) {
			op.Class, op.Reason = Destructive, "_aliases with remove_index deletes an index"
		}
	case esReadEndpoints[endpoint] || scroll:
		op.Class, op.Reason = Read, endpoint+" reads"
	default:
		op.Class, op.Reason = Write, r.Method+" writes"
	}
	return op
}

// scriptClass: a script that sets ctx.op can delete what it visits.
func scriptClass(body []byte, truncated bool, what string) (Class, string) {
	if truncated || bytes.Contains(body, []byte("ctx.op")) {
		return Destructive, what + " with a script that may delete (ctx.op)"
	}
	return Write, what + " writes"
}

func esNeedsBody(r *Request) bool {
	for _, e := range []string{"_bulk", "_update_by_query", "_aliases"} {
		if strings.Contains(r.Path, e) {
			return true
		}
	}
	return false
}

// bulk classifies a _bulk NDJSON body by its action lines: a delete
// action destroys, index, create and update write.
func bulk(body []byte, truncated bool) (Class, string) {
	lines := bytes.Split(body, []byte("\n"))
	class, why := Write, "_bulk writes"
	for i := 0; i < len(lines); i++ {
		line := bytes.TrimSpace(lines[i])
		if len(line) == 0 {
			continue
		}
		var action map[string]json.RawMessage
		if err := json.Unmarshal(line, &action); err != nil || len(action) != 1 {
			return Unknown, "a _bulk action line that does not parse"
		}
		for name := range action {
			switch name {
			case "delete":
				return Destructive, "_bulk with a delete action"
			case "update":
				// Its document follows; a script there may delete.
				if i+1 < len(lines) && bytes.Contains(lines[i+1], []byte("ctx.op")) {
					return Destructive, "_bulk update with a script that may delete (ctx.op)"
				}
				i++
			case "index", "create":
				i++ // its document follows
			default:
				return Unknown, "a _bulk action " + name
			}
		}
	}
	if truncated {
		return Unknown, "a _bulk body larger than what is read to classify it"
	}
	return class, why
}

// MongoDataAPI classifies MongoDB Atlas's Data API over HTTPS by its
// action, the last path segment: find, findOne and aggregate read;
// deleteOne and deleteMany destroy; the rest writes.
func MongoDataAPI(r *Request) Operation {
	action := r.Path[strings.LastIndex(r.Path, "/")+1:]
	op := Operation{Detail: r.Method + " " + r.Path}
	switch action {
	case "find", "findOne", "aggregate":
		op.Class, op.Reason = Read, action+" reads"
	case "deleteOne", "deleteMany":
		op.Class, op.Reason = Destructive, action+" destroys"
	default:
		op.Class, op.Reason = Write, action+" writes"
		if r.Method == http.MethodGet {
			op.Class, op.Reason = Read, "a GET reads"
		}
	}
	return op
}
