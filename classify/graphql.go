package classify

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"
)

// graphqlRequest is one operation request as GitHub and GitLab take it.
type graphqlRequest struct {
	Query         *string         `json:"query"`
	OperationName string          `json:"operationName"`
	Variables     json.RawMessage `json:"variables"`
	Extensions    json.RawMessage `json:"extensions"`
}

// maxGraphQLTokens bounds the parser's work on one document.
const maxGraphQLTokens = 100000

// destructiveWords are the words of a mutation field's camelCase or
// snake_case name that make it destructive.
var destructiveWords = map[string]bool{"delete": true, "destroy": true, "force": true}

// wordBoundary splits camelCase and snake_case names into words.
var wordBoundary = regexp.MustCompile(`[A-Z]?[a-z0-9]+|[A-Z]+`)

func destructiveName(name string) bool {
	for _, w := range wordBoundary.FindAllString(name, -1) {
		if destructiveWords[strings.ToLower(w)] {
			return true
		}
	}
	return false
}

// GraphQL classifies a GraphQL POST body: one request object, or GitLab's
// batched array, taking the worst. A query or subscription reads; a
// mutation writes, and is destructive when a top-level field's name has
// the word delete, destroy or force, or when an argument or a variable
// anywhere sets force to true. With several operations, operationName
// picks one; without it, every operation counts. A persisted query
// without its text is unknown, as is anything that does not parse.
func GraphQL(body []byte, truncated bool) (Class, string) {
	return graphQL(body, truncated, summarize)
}

func graphQL(body []byte, truncated bool, summaries func(string) *docSummary) (Class, string) {
	if truncated {
		return Unknown, "the GraphQL body is larger than what is read to classify it"
	}
	body = bytes.TrimSpace(body)
	var raws []map[string]json.RawMessage
	if len(body) > 0 && body[0] == '[' {
		if err := json.Unmarshal(body, &raws); err != nil {
			return Unknown, "the GraphQL batch is not JSON: " + err.Error()
		}
	} else {
		var one map[string]json.RawMessage
		if err := json.Unmarshal(body, &one); err != nil {
			return Unknown, "the GraphQL request is not JSON: " + err.Error()
		}
		raws = []map[string]json.RawMessage{one}
	}
	if len(raws) == 0 {
		return Unknown, "an empty GraphQL batch"
	}
	class, why := Read, ""
	for _, raw := range raws {
		r, ok := graphqlFields(raw)
		c, w := Unknown, "a GraphQL request whose fields do not decode"
		if ok {
			c, w = graphqlOne(r, summaries)
		}
		if worst(class, c) != class || why == "" {
			class, why = worst(class, c), w
		}
	}
	return class, why
}

// graphqlFields takes a request's fields by their exact names, as GitHub
// and GitLab read them: Go's decoder would also take "Query" for "query",
// and the server would run a different document than the one classified.
func graphqlFields(raw map[string]json.RawMessage) (graphqlRequest, bool) {
	var r graphqlRequest
	if q, ok := raw["query"]; ok && string(q) != "null" {
		var s string
		if json.Unmarshal(q, &s) != nil {
			return r, false
		}
		r.Query = &s
	}
	if n, ok := raw["operationName"]; ok && string(n) != "null" {
		if json.Unmarshal(n, &r.OperationName) != nil {
			return r, false
		}
	}
	r.Variables, r.Extensions = raw["variables"], raw["extensions"]
	return r, true
}

// graphqlURL classifies a document given in the URL (GET, or a POST whose
// query string carries one, which Rails lets win over the body).
func graphqlURL(q map[string][]string, summaries func(string) *docSummary) (Class, string, bool) {
	if len(q["query"]) == 0 && len(q["operationName"]) == 0 && len(q["variables"]) == 0 {
		return Read, "", false
	}
	if len(q["query"]) != 1 || len(q["operationName"]) > 1 || len(q["variables"]) > 1 {
		return Unknown, "several GraphQL parameters in the URL", true
	}
	r := graphqlRequest{Query: &q["query"][0]}
	if n := q["operationName"]; len(n) == 1 {
		r.OperationName = n[0]
	}
	if v := q["variables"]; len(v) == 1 {
		r.Variables = json.RawMessage(v[0])
	}
	c, w := graphqlOne(r, summaries)
	return c, w + " (in the URL)", true
}

// opSummary is what classification needs of one operation of a parsed
// document; it depends on the document's text only, so it can be cached.
type opSummary struct {
	name        string
	mutation    bool
	fields      string
	destructive string // a top-level field named delete/destroy/force...
	forceArg    bool   // force: true in an argument
	// forceVars are the variables given to force arguments, with those
	// whose default is true.
	forceVars    []string
	defaultsTrue map[string]bool
}

// docSummary is a parsed document's operations, or why it did not parse.
type docSummary struct {
	ops []opSummary
	err string
}

func summarize(query string) *docSummary {
	doc, err := parser.ParseQueryWithTokenLimit(&ast.Source{Input: query}, maxGraphQLTokens)
	if err != nil {
		return &docSummary{err: "the GraphQL document does not parse: " + err.Error()}
	}
	d := &docSummary{}
	for _, op := range doc.Operations {
		s := opSummary{
			name:         op.Name,
			mutation:     op.Operation == ast.Mutation,
			fields:       fieldNames(op.SelectionSet),
			destructive:  destructiveFieldIn(op.SelectionSet, doc.Fragments),
			defaultsTrue: map[string]bool{},
		}
		s.forceArg, s.forceVars = forceArgs(op.SelectionSet, doc.Fragments)
		for _, v := range op.VariableDefinitions {
			if v.DefaultValue != nil && v.DefaultValue.Kind == ast.BooleanValue && v.DefaultValue.Raw == "true" {
				s.defaultsTrue[v.Variable] = true
			}
		}
		d.ops = append(d.ops, s)
	}
	return d
}

func graphqlOne(r graphqlRequest, summaries func(string) *docSummary) (Class, string) {
	if r.Query == nil || strings.TrimSpace(*r.Query) == "" {
		if len(r.Extensions) > 0 {
			return Unknown, "a persisted query without its text"
		}
		return Unknown, "a GraphQL request without a query"
	}
	d := summaries(*r.Query)
	if d.err != "" {
		return Unknown, d.err
	}
	ops := d.ops
	if r.OperationName != "" {
		ops = nil
		for _, op := range d.ops {
			if op.name == r.OperationName {
				ops = append(ops, op)
			}
		}
		if len(ops) == 0 {
			return Unknown, fmt.Sprintf("no operation named %q in the document", r.OperationName)
		}
	}
	if len(ops) == 0 {
		return Unknown, "the GraphQL document has no operation"
	}
	forceVar := forceInJSON(r.Variables)
	var vars map[string]json.RawMessage
	json.Unmarshal(r.Variables, &vars)
	class, why := Read, "a GraphQL query"
	for _, op := range ops {
		if !op.mutation {
			continue
		}
		forced := op.forceArg || forceVar
		for _, v := range op.forceVars {
			val, given := vars[v]
			forced = forced || (given && string(bytes.TrimSpace(val)) == "true") || (!given && op.defaultsTrue[v])
		}
		c, w := Write, "GraphQL mutation "+op.fields
		if op.destructive != "" {
			c, w = Destructive, "GraphQL mutation "+op.destructive+" deletes, destroys or forces"
		} else if forced {
			c, w = Destructive, "GraphQL mutation "+op.fields+" with force set"
		}
		if worst(class, c) != class || class == Read {
			class, why = worst(class, c), w
		}
	}
	return class, why
}

// topFields are the mutation's top-level fields, through fragments.
func topFields(set ast.SelectionSet, frags ast.FragmentDefinitionList, depth int) []*ast.Field {
	if depth > 10 {
		return nil
	}
	var out []*ast.Field
	for _, s := range set {
		switch s := s.(type) {
		case *ast.Field:
			out = append(out, s)
		case *ast.InlineFragment:
			out = append(out, topFields(s.SelectionSet, frags, depth+1)...)
		case *ast.FragmentSpread:
			if f := frags.ForName(s.Name); f != nil {
				out = append(out, topFields(f.SelectionSet, frags, depth+1)...)
			}
		}
	}
	return out
}

func fieldNames(set ast.SelectionSet) string {
	var names []string
	for _, f := range topFields(set, nil, 0) {
		names = append(names, f.Name)
	}
	return strings.Join(names, ", ")
}

func destructiveFieldIn(set ast.SelectionSet, frags ast.FragmentDefinitionList) string {
	for _, f := range topFields(set, frags, 0) {
		if destructiveName(f.Name) {
			return f.Name
		}
	}
	return ""
}

// forceArgs finds force arguments in the mutation's fields, nested input
// objects included: whether one is the literal true, and the variables
// given to any.
func forceArgs(set ast.SelectionSet, frags ast.FragmentDefinitionList) (bool, []string) {
	literal := false
	var vars []string
	var walk func(name string, v *ast.Value, depth int)
	walk = func(name string, v *ast.Value, depth int) {
		if v == nil || depth > 32 {
			return
		}
		if strings.EqualFold(name, "force") {
			switch {
			case v.Kind == ast.BooleanValue && v.Raw == "true":
				literal = true
			case v.Kind == ast.Variable:
				vars = append(vars, v.Raw)
			}
		}
		for _, c := range v.Children {
			walk(c.Name, c.Value, depth+1)
		}
	}
	for _, f := range topFields(set, frags, 0) {
		for _, a := range f.Arguments {
			walk(a.Name, a.Value, 0)
		}
	}
	return literal, vars
}

// forceInJSON finds "force": true anywhere in the variables.
func forceInJSON(raw json.RawMessage) bool {
	if len(raw) == 0 {
		return false
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return false
	}
	var walk func(any, int) bool
	walk = func(v any, depth int) bool {
		if depth > 64 {
			return false
		}
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if b, ok := x.(bool); ok && b && strings.EqualFold(k, "force") {
					return true
				}
				if walk(x, depth+1) {
					return true
				}
			}
		case []any:
			for _, x := range v {
				if walk(x, depth+1) {
					return true
				}
			}
		}
		return false
	}
	return walk(v, 0)
}

// Cache remembers the parse of recent GraphQL documents: agents and their
// tools send the same few documents again and again with new variables,
// and parsing is most of a GraphQL request's classification. Its zero
// value is ready; a nil Cache caches nothing.
type Cache struct {
	mu    sync.Mutex
	docs  map[string]*docSummary
	order []string // oldest first, for eviction
}

// maxCachedDocs bounds the cache: a few hundred documents of up to
// MaxBody each.
const maxCachedDocs = 256

func (c *Cache) summaries(query string) *docSummary {
	if c == nil {
		return summarize(query)
	}
	c.mu.Lock()
	d, ok := c.docs[query]
	c.mu.Unlock()
	if ok {
		return d
	}
	d = summarize(query)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.docs == nil {
		c.docs = map[string]*docSummary{}
	}
	if _, ok := c.docs[query]; !ok {
		if len(c.order) >= maxCachedDocs {
			delete(c.docs, c.order[0])
			c.order = c.order[1:]
		}
		c.docs[query] = d
		c.order = append(c.order, query)
	}
	return d
}

// Classify is the package's Classify with GraphQL documents cached.
func (c *Cache) Classify(rt Route, r *Request) Operation {
	r.cache = c
	return Classify(rt, r)
}
