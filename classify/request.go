package classify

import (
	"net/http"
	"net/url"
	"strings"
)

// Request is what a classifier sees of an HTTP request: the request line,
// the headers, and the body up to the hook's cap.
type Request struct {
	Method string
	// Host is lower-case, without port or trailing dot.
	Host string
	// Path is the decoded path; Query the parsed query string.
	Path     string
	RawQuery string
	Query    url.Values
	Header   http.Header
	// Body is the request body, or its first bytes when Truncated; nil
	// when the classifier did not ask for it (see NeedsBody).
	Body      []byte
	Truncated bool

	cache *Cache // set by Cache.Classify
}

// NewRequest builds a Request from an HTTP request line and headers, with
// the body still to come.
func NewRequest(method, host, path, rawQuery string, header http.Header) *Request {
	return &Request{Method: method, Host: host, Path: path, RawQuery: rawQuery, Query: parseQuery(rawQuery), Header: header}
}

// parseQuery splits a query string on & only, as the services do (Go's
// url.ParseQuery drops any pair with a semicolon, which would hide a
// ClickHouse query=DROP...;), keeping a value it cannot unescape as sent.
func parseQuery(raw string) url.Values {
	q := url.Values{}
	for _, pair := range strings.Split(raw, "&") {
		if pair == "" {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		if uk, err := url.QueryUnescape(k); err == nil {
			k = uk
		}
		if uv, err := url.QueryUnescape(v); err == nil {
			v = uv
		}
		q.Add(k, v)
	}
	return q
}

// MaxBody is how much of a body the classifiers read: enough for any
// GraphQL document, SQL statement or bulk request a person could review.
// A larger body is classified on its head, and a classifier that needs
// all of it says unknown.
const MaxBody = 1 << 20

// worst is the more dangerous of two classes: destructive, then unknown,
// then write, then read.
func worst(a, b Class) Class {
	rank := map[Class]int{Read: 0, Write: 1, Unknown: 2, Destructive: 3}
	if rank[b] > rank[a] {
		return b
	}
	return a
}
