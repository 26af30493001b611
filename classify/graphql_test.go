package classify

import (
	"strings"
	"testing"
)

func TestGraphQL(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       Class
	}{
		{"query", `{"query":"query { viewer { login } }"}`, Read},
		{"shorthand query", `{"query":"{ viewer { login } }"}`, Read},
		{"subscription", `{"query":"subscription { x }"}`, Read},
		{"mutation", `{"query":"mutation { addStar(input:{starrableId:\"x\"}) { clientMutationId } }"}`, Write},
		{"delete mutation", `{"query":"mutation { deleteRef(input:{refId:\"x\"}) { clientMutationId } }"}`, Destructive},
		{"destroy mutation", `{"query":"mutation { destroyBoard(input:{id:\"x\"}) { errors } }"}`, Destructive},
		{"force argument", `{"query":"mutation { updateRef(input:{refId:\"x\", oid:\"y\", force:true}) { clientMutationId } }"}`, Destructive},
		{"force false", `{"query":"mutation { updateRef(input:{refId:\"x\", oid:\"y\", force:false}) { clientMutationId } }"}`, Write},
		{"force in variables", `{"query":"mutation($i: UpdateRefInput!) { updateRef(input:$i) { clientMutationId } }","variables":{"i":{"refId":"x","force":true}}}`, Destructive},
		{"enforcement is not force", `{"query":"mutation { updateEnforcementPolicy(input:{}) { x } }"}`, Write},
		{"operationName picks the query", `{"query":"query A { viewer { login } } mutation B { deleteRef(input:{}) { x } }","operationName":"A"}`, Read},
		{"operationName picks the mutation", `{"query":"query A { viewer { login } } mutation B { deleteRef(input:{}) { x } }","operationName":"B"}`, Destructive},
		{"no operationName: worst", `{"query":"query A { viewer { login } } mutation B { addStar(input:{}) { x } }"}`, Write},
		{"unknown operationName", `{"query":"query A { x }","operationName":"C"}`, Unknown},
		{"batched array (GitLab)", `[{"query":"query { a }"},{"query":"mutation { destroyIssue(input:{}) { x } }"}]`, Destructive},
		{"batched reads", `[{"query":"query { a }"},{"query":"{ b }"}]`, Read},
		{"mutation through a fragment", `{"query":"mutation { ...F } fragment F on Mutation { deleteIssue(input:{}) { x } }"}`, Destructive},
		{"persisted query", `{"operationName":"X","extensions":{"persistedQuery":{"version":1,"sha256Hash":"abc"}}}`, Unknown},
		{"not JSON", `query { x }`, Unknown},
		{"does not parse", `{"query":"mutation {"}`, Unknown},
		{"empty batch", `[]`, Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := GraphQL([]byte(tc.body), false)
			if got != tc.want || why == "" {
				t.Fatalf("%s (%s), want %s", got, why, tc.want)
			}
		})
	}
	if c, _ := GraphQL([]byte(`{"query":"{ x }"}`), true); c != Unknown {
		t.Fatal("a truncated body was classified")
	}
	deep := `{"query":"` + strings.Repeat("{ a ", 5000) + strings.Repeat("}", 5000) + `"}`
	if c, _ := GraphQL([]byte(deep), false); c != Read && c != Unknown {
		t.Fatalf("deep nesting: %s", c)
	}
}

func FuzzGraphQL(f *testing.F) {
	f.Add([]byte(`{"query":"mutation { deleteRef(input:{}) { x } }"}`))
	f.Add([]byte(`[{"query":"query { a }"}]`))
	f.Add([]byte(`{"query":"mutation($i: X) { a(input:$i) { b } }","variables":{"i":{"force":true}}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		c, why := GraphQL(body, false)
		if why == "" || (c != Read && c != Write && c != Destructive && c != Unknown) {
			t.Fatalf("%q: %s %q", body, c, why)
		}
	})
}

// TestCacheKeepsVariablesPerRequest: a cached document is classified with
// each request's own variables, and the cache stays bounded.
func TestCacheKeepsVariablesPerRequest(t *testing.T) {
	var cache Cache
	rt := Route{Kind: KindForge, Service: "github", Scope: "github"}
	doc := `"query":"mutation($i: UpdateRefInput!) { updateRef(input:$i) { clientMutationId } }"`
	for _, tc := range []struct {
		vars string
		want Class
	}{{`{"i":{"force":false}}`, Write}, {`{"i":{"force":true}}`, Destructive}, {`{"i":{}}`, Write}} {
		r := NewRequest("POST", "api.github.com", "/graphql", "", nil)
		r.Body = []byte("{" + doc + `,"variables":` + tc.vars + "}")
		if op := cache.Classify(rt, r); op.Class != tc.want {
			t.Errorf("%s: %s", tc.vars, op.Class)
		}
	}
	for i := range 2 * maxCachedDocs {
		cache.summaries(strings.Repeat("{ a }", 1) + strings.Repeat(" ", i))
	}
	if len(cache.docs) > maxCachedDocs || len(cache.order) > maxCachedDocs {
		t.Fatalf("cache grew to %d", len(cache.docs))
	}
}
