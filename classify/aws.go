package classify

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
)

// AWS protocols, as far as a refusal must match them.
const (
	awsJSON     = "json"
	awsQuery    = "query"
	awsEC2      = "ec2"
	awsRestXML  = "rest-xml"
	awsRestJSON = "rest-json"
	awsCBOR     = "rpc-v2-cbor"
)

// awsCall is what is known of an AWS request: its service (from the SigV4
// credential scope), its action, and its protocol.
type awsCall struct {
	service, action, protocol string
	actions                   []string // every action the request names
	formUnread                bool     // a form body too large or malformed to read
}

// awsReadPrefixes and awsDestructivePrefixes classify an action by name.
var (
	awsReadPrefixes = []string{"Get", "List", "Describe", "Head", "Select", "Query", "Scan", "BatchGet", "Lookup",
		"Search", "Retrieve", "View", "Estimate", "Detect", "Test"}
	awsDestructivePrefixes = []string{"Delete", "Terminate", "Remove", "Purge", "Destroy", "Deregister", "Revoke", "BatchDelete"}
)

// awsExceptions are actions whose name misleads the prefix rule, as
// "service:Action" (IAM's own access levels agree with each).
var awsExceptions = map[string]Class{
	"sts:GetSessionToken":            Read, // mints a session for the caller's own identity; changes nothing
	"sts:GetFederationToken":         Read,
	"ecr:GetAuthorizationToken":      Read,  // needed by every docker pull from ECR
	"sqs:ReceiveMessage":             Read,  // not a write, whatever the name
	"sqs:DeleteMessage":              Write, // a consumer's acknowledgement, not a loss of data
	"sqs:DeleteMessageBatch":         Write,
	"logs:FilterLogEvents":           Read,
	"logs:StartQuery":                Read,
	"cloudwatch:GetMetricData":       Read,
	"dynamodb:TransactGetItems":      Read,
	"s3:DeleteObjectTagging":         Write,
	"ec2:RevokeSecurityGroupIngress": Write, // tightens access
	"ec2:RevokeSecurityGroupEgress":  Write,
	"kms:ScheduleKeyDeletion":        Destructive, // the key, and all it encrypted, goes
	"kms:DisableKey":                 Write,
}

// awsStatements are actions that carry SQL (PartiQL, the RDS Data API):
// the statement decides.
var awsStatements = map[string]bool{"ExecuteStatement": true, "BatchExecuteStatement": true, "ExecuteTransaction": true}

// AWSAction classifies an AWS action name of a service.
func AWSAction(service, action string) (Class, string) {
	if c, ok := awsExceptions[service+":"+action]; ok {
		return c, service + ":" + action + " (a known exception to the name rule)"
	}
	for _, p := range awsDestructivePrefixes {
		if strings.HasPrefix(action, p) {
			return Destructive, service + ":" + action + " (" + p + "...)"
		}
	}
	for _, p := range awsReadPrefixes {
		if strings.HasPrefix(action, p) {
			return Read, service + ":" + action + " (" + p + "...)"
		}
	}
	return Write, service + ":" + action
}

// awsService reads the service from the SigV4 credential scope, in the
// Authorization header or a presigned URL's X-Amz-Credential: the fourth
// part of AKID/date/region/service/aws4_request, or the third of SigV4A's
// AKID/date/service/aws4_request. s3express is S3.
func awsService(r *Request) string {
	cred := r.Query.Get("X-Amz-Credential")
	if auth := r.Header.Get("Authorization"); strings.HasPrefix(auth, "AWS4-") {
		if _, rest, ok := strings.Cut(auth, "Credential="); ok {
			cred, _, _ = strings.Cut(rest, ",")
		}
	}
	var svc string
	switch parts := strings.Split(strings.TrimSpace(cred), "/"); len(parts) {
	case 5:
		svc = parts[3]
	case 4:
		svc = parts[2]
	}
	if svc == "s3express" {
		svc = "s3"
	}
	return svc
}

func isForm(r *Request) bool {
	return strings.HasPrefix(strings.ToLower(r.Header.Get("Content-Type")), "application/x-www-form-urlencoded")
}

func awsNeedsBody(r *Request) bool {
	if r.Method != http.MethodPost {
		return false
	}
	t := r.Header.Get("X-Amz-Target")
	return isForm(r) || awsStatements[t[strings.LastIndexAny(t, ".#")+1:]]
}

// awsIdentify finds a request's action: X-Amz-Target (JSON), Action= in
// the query or form (query), the Smithy RPC v2 CBOR path; else it is a
// REST call, named by method and path. When a request names actions in
// several places, actions holds them all and the worst decides.
func awsIdentify(r *Request) awsCall {
	c := awsCall{service: awsService(r)}
	if t := r.Header.Get("X-Amz-Target"); t != "" {
		c.protocol = awsJSON
		c.action = t[strings.LastIndexAny(t, ".#")+1:]
		c.actions = append(c.actions, c.action)
	}
	for _, a := range r.Query["Action"] {
		c.actions = append(c.actions, a)
	}
	if isForm(r) && r.Method == http.MethodPost {
		if r.Truncated {
			c.formUnread = true
		} else if form, err := url.ParseQuery(string(r.Body)); err == nil {
			c.actions = append(c.actions, form["Action"]...)
		} else {
			c.formUnread = true
		}
	}
	if c.protocol == awsJSON {
		return c
	}
	if len(c.actions) > 0 {
		c.protocol, c.action = awsQuery, c.actions[0]
		if c.service == "ec2" {
			c.protocol = awsEC2
		}
		return c
	}
	if strings.HasPrefix(r.Path, "/service/") {
		// rpcv2Cbor: /service/{ServiceName}/operation/{OperationName}
		if parts := strings.Split(strings.Trim(r.Path, "/"), "/"); len(parts) == 4 && parts[2] == "operation" {
			c.protocol, c.action = awsCBOR, parts[3]
			c.actions = []string{c.action}
			return c
		}
	}
	if c.service == "s3" || (c.service == "" && isS3Host(r.Host)) {
		c.service, c.protocol = "s3", awsRestXML
		return c
	}
	c.protocol = awsRestJSON
	return c
}

// isS3Host recognizes S3's endpoints, legacy dashed ones included.
func isS3Host(h string) bool {
	return strings.HasPrefix(h, "s3.") || strings.HasPrefix(h, "s3-") || strings.Contains(h, ".s3.") ||
		strings.Contains(h, ".s3-") || strings.Contains(h, ".s3express")
}

// AWS classifies an AWS API request (see AWSAction for the name rule). S3
// and the other REST services are classified by method and path: POST
// ?delete is DeleteObjects, DELETE destroys.
func AWS(r *Request) Operation {
	c := awsIdentify(r)
	op := Operation{Detail: r.Method + " " + r.Path}
	if len(c.actions) > 0 {
		op.Class = Read
		for _, a := range c.actions {
			cl, why := AWSAction(c.service, a)
			if awsStatements[a] {
				cl, why = awsStatementClass(r)
			}
			if worst(op.Class, cl) != op.Class || op.Reason == "" {
				op.Class, op.Reason = worst(op.Class, cl), why
			}
		}
		op.Detail = c.service + ":" + strings.Join(c.actions, "+")
		if c.formUnread {
			op.Class, op.Reason = worst(op.Class, Unknown), op.Reason+"; the form body was not read"
		}
		return op
	}
	if c.formUnread {
		op.Class, op.Reason = Unknown, "a form body too large or malformed to find its action"
		return op
	}
	switch {
	case c.service == "s3" && r.Method == http.MethodPost && r.Query.Has("delete"):
		op.Class, op.Reason, op.Detail = Destructive, "s3:DeleteObjects (POST ?delete)", "s3:DeleteObjects "+r.Path
	case c.service == "s3" && r.Method == http.MethodPost && r.Query.Has("select"):
		op.Class, op.Reason = Read, "s3:SelectObjectContent"
	default:
		op.Class, op.Reason = REST(r.Method)
		op.Reason = c.service + ": " + op.Reason
	}
	return op
}

// awsStatementClass classifies the SQL an ExecuteStatement-like action
// carries: {"Statement": ...} (DynamoDB PartiQL, RDS Data API sql) or
// {"Statements": [{"Statement": ...}]} / {"TransactStatements": [...]}.
func awsStatementClass(r *Request) (Class, string) {
	if r.Truncated {
		return Unknown, "a statement body too large to read"
	}
	var body map[string]json.RawMessage
	if json.Unmarshal(r.Body, &body) != nil {
		return Unknown, "a statement body that is not JSON"
	}
	var stmts []string
	for _, key := range []string{"Statement", "sql"} {
		var s string
		if json.Unmarshal(body[key], &s) == nil && s != "" {
			stmts = append(stmts, s)
		}
	}
	for _, key := range []string{"Statements", "TransactStatements"} {
		var list []map[string]json.RawMessage
		if json.Unmarshal(body[key], &list) == nil {
			for _, item := range list {
				var s string
				if json.Unmarshal(item["Statement"], &s) == nil {
					stmts = append(stmts, s)
				}
			}
		}
	}
	if len(stmts) == 0 {
		return Unknown, "no statement found in the request"
	}
	return SQL(strings.Join(stmts, ";\n"))
}

// awsRefusal is AccessDenied in the shape of the request's protocol.
func awsRefusal(r *Request, message string) (int, http.Header, []byte) {
	c := awsIdentify(r)
	h := http.Header{}
	switch c.protocol {
	case awsJSON:
		h.Set("Content-Type", "application/x-amz-json-1.1")
		h.Set("X-Amzn-ErrorType", "AccessDeniedException")
		return http.StatusForbidden, h, jsonBody(map[string]string{"__type": "AccessDeniedException", "message": message})
	case awsCBOR:
		h.Set("Content-Type", "application/cbor")
		h.Set("Smithy-Protocol", "rpc-v2-cbor")
		h.Set("X-Amzn-ErrorType", "AccessDeniedException")
		return http.StatusForbidden, h, cborStringMap([][2]string{{"__type", "AccessDeniedException"}, {"message", message}})
	case awsQuery:
		h.Set("Content-Type", "text/xml")
		return http.StatusForbidden, h, []byte("<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code><Message>" +
			xmlEscape(message) + "</Message></Error><RequestId>guard</RequestId></ErrorResponse>")
	case awsEC2:
		h.Set("Content-Type", "text/xml")
		return http.StatusForbidden, h, []byte("<Response><Errors><Error><Code>UnauthorizedOperation</Code><Message>" +
			xmlEscape(message) + "</Message></Error></Errors><RequestID>guard</RequestID></Response>")
	case awsRestXML:
		h.Set("Content-Type", "application/xml")
		return http.StatusForbidden, h, []byte("<Error><Code>AccessDenied</Code><Message>" + xmlEscape(message) +
			"</Message><RequestId>guard</RequestId></Error>")
	}
	h.Set("Content-Type", "application/json")
	h.Set("X-Amzn-ErrorType", "AccessDeniedException")
	return http.StatusForbidden, h, jsonBody(map[string]string{"message": message})
}

// cborStringMap encodes a map of text strings in CBOR (RFC 8949).
func cborStringMap(pairs [][2]string) []byte {
	out := cborHead(nil, 5, len(pairs))
	for _, p := range pairs {
		out = cborHead(out, 3, len(p[0]))
		out = append(out, p[0]...)
		out = cborHead(out, 3, len(p[1]))
		out = append(out, p[1]...)
	}
	return out
}

func cborHead(out []byte, major byte, n int) []byte {
	switch {
	case n < 24:
		return append(out, major<<5|byte(n))
	case n < 1<<8:
		return append(out, major<<5|24, byte(n))
	case n < 1<<16:
		return append(out, major<<5|25, byte(n>>8), byte(n))
	}
	return append(out, major<<5|26, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}
