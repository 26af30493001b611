package classify

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

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
	if truncated {
		return Unknown, "the GraphQL body is larger than what is read to classify it"
	}
	body = bytes.TrimSpace(body)
	var reqs []graphqlRequest
	if len(body) > 0 && body[0] == '[' {
		if err := json.Unmarshal(body, &reqs); err != nil {
			return Unknown, "the GraphQL batch is not JSON: " + err.Error()
		}
	} else {
		var one graphqlRequest
		if err := json.Unmarshal(body, &one); err != nil {
			return Unknown, "the GraphQL request is not JSON: " + err.Error()
		}
		reqs = []graphqlRequest{one}
	}
	if len(reqs) == 0 {
		return Unknown, "an empty GraphQL batch"
	}
	class, why := Read, ""
	for _, r := range reqs {
		c, w := graphqlOne(r)
		if worst(class, c) != class || why == "" {
			class, why = worst(class, c), w
		}
	}
	return class, why
}

func graphqlOne(r graphqlRequest) (Class, string) {
	if r.Query == nil || strings.TrimSpace(*r.Query) == "" {
		if len(r.Extensions) > 0 {
			return Unknown, "a persisted query without its text"
		}
		return Unknown, "a GraphQL request without a query"
	}
	doc, err := parser.ParseQueryWithTokenLimit(&ast.Source{Input: *r.Query}, maxGraphQLTokens)
	if err != nil {
		return Unknown, "the GraphQL document does not parse: " + err.Error()
	}
	ops := doc.Operations
	if r.OperationName != "" {
		op := ops.ForName(r.OperationName)
		if op == nil {
			return Unknown, fmt.Sprintf("no operation named %q in the document", r.OperationName)
		}
		ops = ast.OperationList{op}
	}
	if len(ops) == 0 {
		return Unknown, "the GraphQL document has no operation"
	}
	forceVar := forceInJSON(r.Variables)
	class, why := Read, "a GraphQL query"
	for _, op := range ops {
		if op.Operation != ast.Mutation {
			continue
		}
		c, w := Write, "GraphQL mutation "+fieldNames(op.SelectionSet)
		if name := destructiveFieldIn(op.SelectionSet, doc.Fragments); name != "" {
			c, w = Destructive, "GraphQL mutation "+name+" deletes, destroys or forces"
		} else if forceArg(op.SelectionSet, doc.Fragments) || forceVar {
			c, w = Destructive, "GraphQL mutation "+fieldNames(op.SelectionSet)+" with force set"
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

// forceArg finds force: true in any argument of the mutation's fields,
// nested input objects included.
func forceArg(set ast.SelectionSet, frags ast.FragmentDefinitionList) bool {
	for _, f := range topFields(set, frags, 0) {
		for _, a := range f.Arguments {
			if forceValue(a.Name, a.Value, 0) {
				return true
			}
		}
	}
	return false
}

func forceValue(name string, v *ast.Value, depth int) bool {
	if v == nil || depth > 32 {
		return false
	}
	if strings.EqualFold(name, "force") && v.Kind == ast.BooleanValue && v.Raw == "true" {
		return true
	}
	for _, c := range v.Children {
		if forceValue(c.Name, c.Value, depth+1) {
			return true
		}
	}
	return false
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
