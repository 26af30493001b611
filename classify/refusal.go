package classify

import (
	"encoding/json"
	"encoding/xml"
	"net/http"
	"strings"
)

// Refusal is a blocked request's answer in its service's own protocol, so
// that the client prints the message as an access-denied error: a
// Kubernetes Status, AWS AccessDenied in the service's shape, a registry
// DENIED error, an Elasticsearch security_exception, ClickHouse's own
// error, or {"message": ...} for REST. (A git push is refused with
// ReceivePackRefusal.) message ends with "blocked by guardrails".
func Refusal(rt Route, r *Request, message string) (int, http.Header, []byte) {
	h := http.Header{"Content-Type": {"application/json"}}
	switch rt.Kind {
	case KindAWS:
		return awsRefusal(r, message)
	case KindKubernetes:
		return http.StatusForbidden, h, jsonBody(map[string]any{
			"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{},
			"status": "Failure", "message": message, "reason": "Forbidden", "code": http.StatusForbidden,
		})
	case KindRegistry:
		return http.StatusForbidden, h, jsonBody(map[string]any{
			"errors": []map[string]any{{"code": "DENIED", "message": message}},
		})
	case KindElasticsearch:
		cause := map[string]any{"type": "security_exception", "reason": message}
		return http.StatusForbidden, h, jsonBody(map[string]any{
			"error":  map[string]any{"root_cause": []any{cause}, "type": "security_exception", "reason": message},
			"status": http.StatusForbidden,
		})
	case KindClickHouse:
		h = http.Header{"Content-Type": {"text/plain; charset=UTF-8"}, "X-Clickhouse-Exception-Code": {"497"}}
		return http.StatusForbidden, h, []byte("Code: 497. DB::Exception: " + message + ". (ACCESS_DENIED)\n")
	}
	return http.StatusForbidden, h, jsonBody(map[string]string{"message": message})
}

func jsonBody(v any) []byte {
	b, _ := json.Marshal(v)
	return append(b, '\n')
}

func xmlEscape(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}
