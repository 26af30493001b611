package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/google/go-containerregistry/pkg/crane"
	"github.com/google/go-containerregistry/pkg/v1/random"

	"guard/internal/testgit"
	"guard/internal/testpki"
	"guard/internal/testregistry"
)

// services is the world the guardrails matrix runs in: real servers on
// loopback under the names of real services, each on its own port.
type services struct {
	pki   *testpki.CA
	hosts map[string]string // name -> 127.0.0.x
	ports map[string]int    // name -> port
	git   string            // the bare repositories' root
}

// serve starts an HTTPS server for name on addr.
func (s *services) serve(t *testing.T, name, ip string, h http.Handler) {
	t.Helper()
	s.ports[name] = serveHTTPS(t, ip, h, serverTLS(t, s.pki, name))
	s.hosts[name] = ip
}

func (s *services) url(name, path string) string {
	return fmt.Sprintf("https://%s:%d%s", name, s.ports[name], path)
}

// kubeStub answers what kubectl get, create, delete and exec ask.
func kubeStub() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/api":
			io.WriteString(w, `{"kind":"APIVersions","versions":["v1"],"serverAddressByClientCIDRs":[{"clientCIDR":"0.0.0.0/0","serverAddress":"x"}]}`)
		case r.URL.Path == "/apis":
			io.WriteString(w, `{"kind":"APIGroupList","apiVersion":"v1","groups":[]}`)
		case r.URL.Path == "/api/v1":
			io.WriteString(w, `{"kind":"APIResourceList","groupVersion":"v1","resources":[
			  {"name":"pods","singularName":"pod","namespaced":true,"kind":"Pod","verbs":["get","list","delete","create"]},
			  {"name":"pods/exec","singularName":"","namespaced":true,"kind":"PodExecOptions","verbs":["create","get"]},
			  {"name":"configmaps","singularName":"configmap","namespaced":true,"kind":"ConfigMap","verbs":["get","list","create","delete","patch"]}]}`)
		case strings.HasSuffix(r.URL.Path, "/pods") && r.Method == http.MethodGet:
			io.WriteString(w, `{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[]}`)
		case strings.HasSuffix(r.URL.Path, "/pods/web-1") && r.Method == http.MethodGet:
			io.WriteString(w, `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"web-1","namespace":"default"},
			  "spec":{"containers":[{"name":"web","image":"web"}]},"status":{"phase":"Running"}}`)
		case strings.Contains(r.URL.Path, "/configmaps") && r.Method == http.MethodPost:
			io.Copy(io.Discard, r.Body)
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"settings","namespace":"default"},"data":{"a":"b"}}`)
		case r.Method == http.MethodDelete:
			io.WriteString(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success"}`)
		case strings.HasSuffix(r.URL.Path, "/exec"):
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the stub does not stream","reason":"BadRequest","code":400}`)
		default:
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","reason":"NotFound","code":404}`)
		}
	})
}

// dynamoStub answers DynamoDB's JSON protocol.
func dynamoStub() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		switch r.Header.Get("X-Amz-Target") {
		case "DynamoDB_20120810.ListTables":
			io.WriteString(w, `{"TableNames":["orders"]}`)
		case "DynamoDB_20120810.DeleteTable":
			io.WriteString(w, `{"TableDescription":{"TableName":"orders","TableStatus":"DELETING"}}`)
		default:
			io.WriteString(w, `{}`)
		}
	})
}

// echoStub answers 200 with a fixed body, for ClickHouse and Elasticsearch.
func echoStub(body string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, body)
	})
}

func startServices(t *testing.T) *services {
	s := &services{pki: testpki.New(t), hosts: map[string]string{}, ports: map[string]int{}}
	s.git = testgit.SeededRepo(t, "site.git", "one\n")
	testgit.Run(t, filepath.Join(s.git, "site.git"), nil, "config", "http.receivepack", "true")
	s.serve(t, "github.com", "127.0.0.21", testgit.Backend(t, s.git))
	s.serve(t, "registry.e2e.test", "127.0.0.22", testregistry.New())
	s.serve(t, "kube.e2e.test", "127.0.0.23", kubeStub())
	s.serve(t, "dynamodb.us-east-1.amazonaws.com", "127.0.0.24", dynamoStub())
	s.serve(t, "ch.e2e.test", "127.0.0.25", echoStub("1\n"))
	s.serve(t, "es.e2e.test", "127.0.0.26", echoStub(`{"acknowledged":true}`))
	return s
}

// allowed is the write-policy table with nobody to answer a prompt.
func allowed(mode, class string) bool {
	return class == "read" || mode == "off" || (mode == "destructive" && class == "write")
}

// TestGuardrailsWithRealClients runs git, crane, kubectl, the aws CLI,
// aws-sdk-go-v2 and curl through guardd against real or stub servers, under
// each of the four modes (with no prompt attached, so promptOnWrite
// refuses): reads always pass, writes pass under off and destructive,
// destructive calls only under off, and each refusal reaches the client in
// its own protocol.
func TestGuardrailsWithRealClients(t *testing.T) {
	s := startServices(t)
	for _, mode := range []string{"off", "promptOnWrite", "destructive", "readOnly"} {
		t.Run(mode, func(t *testing.T) { runMatrix(t, s, mode) })
	}
}

func runMatrix(t *testing.T, s *services, mode string) {
	dir := shortDir(t)
	writeFile(t, dir, "upstream-ca.pem", string(s.pki.PEM))
	var rulesText strings.Builder
	for name := range s.hosts {
		fmt.Fprintf(&rulesText, "allow web %s\n", name)
	}
	rulesText.WriteString("default deny\n")
	hosts, _ := json.Marshal(s.hosts)
	rulesJSON, _ := json.Marshal(rulesText.String())
	writeFile(t, dir, "kubeconfig", fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: e2e\n  cluster:\n    server: %s\n", s.url("kube.e2e.test", "")))
	prof := writeFile(t, dir, "profile.json", fmt.Sprintf(`{"name":"matrix",
	  "kubeconfigs":["kubeconfig"],
	  "credentials":[
	    {"id":"reg","title":"Registry","service":"registry","hosts":["registry.e2e.test"],"secret":{"value":"canary-registry-secret-0001"}},
	    {"id":"ch","title":"ClickHouse","service":"clickhouse","hosts":["ch.e2e.test"],"secret":{"value":"canary-clickhouse-secret-0002"}},
	    {"id":"es","title":"Elasticsearch","service":"elasticsearch","hosts":["es.e2e.test"],"secret":{"value":"canary-elastic-secret-0003"}}],
	  "guardrails":{"github":%[1]q,"aws":%[1]q,"kubernetes":%[1]q,"registry":%[1]q,"db:ch.e2e.test":%[1]q,"db:es.e2e.test":%[1]q},
	  "egress":{"rules":%[2]s,"upstreamCAs":["upstream-ca.pem"]},
	  "dns":{"hosts":%[3]s}}`, mode, rulesJSON, hosts))
	proxyAddr := freeLoopbackAddr(t)
	g := startGuardd(t, "--profile", prof, "--proxy-listen", proxyAddr)
	caPEM, _ := g.ctl(t, "ca", "export")
	caFile := writeFile(t, dir, "guard-ca.pem", caPEM)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(caPEM))
	proxyURL, _ := url.Parse("http://" + proxyAddr)
	tr := &http.Transport{Proxy: http.ProxyURL(proxyURL), TLSClientConfig: &tls.Config{RootCAs: pool}}
	env := []string{"PATH=/usr/bin:/bin:/usr/local/bin", "HOME=" + dir, "https_proxy=http://" + proxyAddr, "HTTPS_PROXY=http://" + proxyAddr}

	var mu sync.Mutex
	var failures []string
	expect := func(client, op, class string, ok bool, out string) {
		t.Helper()
		want := allowed(mode, class)
		switch {
		case want && !ok:
			mu.Lock()
			failures = append(failures, fmt.Sprintf("%s %s (%s) was refused under %s:\n%s", client, op, class, mode, out))
			mu.Unlock()
		case !want && ok:
			mu.Lock()
			failures = append(failures, fmt.Sprintf("%s %s (%s) passed under %s:\n%s", client, op, class, mode, out))
			mu.Unlock()
		case !want && !strings.Contains(out, "blocked by guardrails"):
			mu.Lock()
			failures = append(failures, fmt.Sprintf("%s %s (%s) under %s failed without guard's message:\n%s", client, op, class, mode, out))
			mu.Unlock()
		}
	}
	// Every byte a client got back, to look for the real secrets in.
	var seen strings.Builder
	run := func(dir string, extraEnv []string, name string, args ...string) (string, bool) {
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		cmd.Env = append(append([]string{}, env...), extraEnv...)
		out, err := cmd.CombinedOutput()
		mu.Lock()
		seen.Write(out)
		mu.Unlock()
		return string(out), err == nil
	}

	// git: clone (read), push (write), force push and branch delete
	// (destructive), with guardd's CA and the explicit proxy.
	gitEnv := []string{"GIT_SSL_CAINFO=" + caFile, "GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.test",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.test"}
	work := filepath.Join(dir, "work")
	out, ok := run(dir, gitEnv, "git", "clone", "-q", s.url("github.com", "/site.git"), work)
	expect("git", "clone", "read", ok, out)
	if ok {
		os.WriteFile(filepath.Join(work, "README"), []byte(mode+"\n"), 0o644)
		run(work, gitEnv, "git", "commit", "-q", "-am", "a change under "+mode)
		out, ok = run(work, gitEnv, "git", "push", "-q", "origin", "HEAD:refs/heads/"+mode)
		expect("git", "push a new branch", "write", ok, out)
		if ok || mode == "off" || mode == "destructive" {
			os.WriteFile(filepath.Join(work, "README"), []byte(mode+" again\n"), 0o644)
			run(work, gitEnv, "git", "commit", "-q", "-am", "fast-forward")
			out, ok = run(work, gitEnv, "git", "push", "-q", "origin", "HEAD:refs/heads/"+mode)
			expect("git", "fast-forward push", "write", ok, out)
			run(work, gitEnv, "git", "commit", "-q", "--amend", "-m", "rewritten")
			out, ok = run(work, gitEnv, "git", "push", "-q", "--force", "origin", "HEAD:refs/heads/"+mode)
			expect("git", "force push", "destructive", ok, out)
			if !ok && !strings.Contains(out, "[remote rejected]") {
				failures = append(failures, "a refused push is not a clean receive-pack rejection:\n"+out)
			}
			out, ok = run(work, gitEnv, "git", "push", "-q", "origin", "--delete", mode)
			expect("git", "delete a branch", "destructive", ok, out)
		}
	}

	// crane: push (write), pull (read), delete a manifest (destructive).
	ref := fmt.Sprintf("registry.e2e.test:%d/team/app:%s", s.ports["registry.e2e.test"], strings.ToLower(mode))
	img, _ := random.Image(1<<16, 2)
	opt := crane.WithTransport(tr)
	err := crane.Push(img, ref, opt)
	expect("crane", "push", "write", err == nil, fmt.Sprint(err))
	if err == nil {
		_, err = crane.Pull(ref, opt)
		expect("crane", "pull", "read", err == nil, fmt.Sprint(err))
		digest, _ := img.Digest()
		err = crane.Delete(strings.Split(ref, ":"+strings.ToLower(mode))[0]+"@"+digest.String(), opt)
		expect("crane", "delete", "destructive", err == nil, fmt.Sprint(err))
	}

	// kubectl: get (read), create and exec (writes), delete (destructive).
	kubeconfig := writeFile(t, dir, "kubeconfig-client", fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: %s
    certificate-authority: %s
    proxy-url: http://%s
users:
- name: u
  user:
    token: not-a-real-token
contexts:
- name: e2e
  context: {cluster: e2e, user: u, namespace: default}
current-context: e2e
`, s.url("kube.e2e.test", ""), caFile, proxyAddr))
	kube := []string{"KUBECONFIG=" + kubeconfig}
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Fatal("kubectl is needed: .ci/run installs it")
	}
	out, ok = run(dir, kube, "kubectl", "get", "pods")
	expect("kubectl", "get pods", "read", ok, out)
	out, ok = run(dir, kube, "kubectl", "create", "configmap", "settings", "--from-literal=a=b")
	expect("kubectl", "create configmap", "write", ok, out)
	out, ok = run(dir, kube, "kubectl", "delete", "pod", "web-1")
	expect("kubectl", "delete pod", "destructive", ok, out)
	out, _ = run(dir, kube, "kubectl", "exec", "web-1", "--", "sh")
	// The stub cannot stream, so an allowed exec fails there; a refused
	// one fails at guard with Forbidden.
	expect("kubectl", "exec", "write", !strings.Contains(out, "blocked by guardrails"), out)

	// aws-sdk-go-v2: ListTables (read), DeleteTable (destructive).
	ddb := dynamodb.New(dynamodb.Options{
		Region:           "us-east-1",
		Credentials:      credentials.NewStaticCredentialsProvider("AKIAEXAMPLEEXAMPLE00", "secretsecretsecretsecretsecretsecret0000", ""),
		BaseEndpoint:     aws.String(s.url("dynamodb.us-east-1.amazonaws.com", "")),
		HTTPClient:       &http.Client{Transport: tr},
		RetryMaxAttempts: 1,
	})
	ctx := context.Background()
	_, err = ddb.ListTables(ctx, &dynamodb.ListTablesInput{})
	expect("aws-sdk-go-v2", "ListTables", "read", err == nil, fmt.Sprint(err))
	_, err = ddb.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String("orders")})
	expect("aws-sdk-go-v2", "DeleteTable", "destructive", err == nil, fmt.Sprint(err))
	var apiErr smithy.APIError
	if err != nil && (!errors.As(err, &apiErr) || apiErr.ErrorCode() != "AccessDeniedException") {
		failures = append(failures, fmt.Sprintf("the SDK did not see AccessDenied: %v", err))
	}
	_, err = ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("orders"),
		Item: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "1"}}})
	expect("aws-sdk-go-v2", "PutItem", "write", err == nil, fmt.Sprint(err))

	// The aws CLI: the same calls.
	if _, err := exec.LookPath("aws"); err != nil {
		t.Fatal("the aws CLI is needed: .ci/run installs it")
	}
	awsEnv := []string{"AWS_CA_BUNDLE=" + caFile, "AWS_ACCESS_KEY_ID=AKIAEXAMPLEEXAMPLE00", "AWS_SECRET_ACCESS_KEY=secretsecretsecretsecretsecretsecret0000",
		"AWS_DEFAULT_REGION=us-east-1", "AWS_MAX_ATTEMPTS=1", "AWS_PAGER=", "PATH=" + os.Getenv("PATH")}
	endpoint := "--endpoint-url=" + s.url("dynamodb.us-east-1.amazonaws.com", "")
	out, ok = run(dir, awsEnv, "aws", "dynamodb", "list-tables", endpoint)
	expect("aws CLI", "list-tables", "read", ok, out)
	out, ok = run(dir, awsEnv, "aws", "dynamodb", "delete-table", "--table-name", "orders", endpoint)
	expect("aws CLI", "delete-table", "destructive", ok, out)
	if !ok && !strings.Contains(out, "AccessDeniedException") {
		failures = append(failures, "the aws CLI did not print AccessDenied:\n"+out)
	}

	// curl: ClickHouse SQL and Elasticsearch shapes.
	curl := func(args ...string) (string, bool) {
		return run(dir, nil, "curl", append([]string{"-sS", "-f", "--max-time", "20", "--proxy", "http://" + proxyAddr, "--cacert", caFile}, args...)...)
	}
	curlBody := func(args ...string) string { // the refusal's body, whatever the status
		out, _ := run(dir, nil, "curl", append([]string{"-sS", "--max-time", "20", "--proxy", "http://" + proxyAddr, "--cacert", caFile}, args...)...)
		return out
	}
	ch := s.url("ch.e2e.test", "/")
	for _, c := range []struct{ sql, class string }{
		{"SELECT count() FROM events", "read"},
		{"INSERT INTO events VALUES (1)", "write"},
		{"/* cleanup */ DROP TABLE events", "destructive"},
		{"ALTER TABLE events DELETE WHERE 1", "destructive"},
	} {
		_, ok := curl("--data-binary", c.sql, ch)
		expect("curl ClickHouse", c.sql, c.class, ok, curlBody("--data-binary", c.sql, ch))
	}
	es := s.url("es.e2e.test", "")
	for _, c := range []struct{ method, path, body, class string }{
		{"POST", "/logs/_search", `{"query":{"match_all":{}}}`, "read"},
		{"POST", "/logs/_doc", `{"a":1}`, "write"},
		{"POST", "/_bulk", "{\"delete\":{\"_index\":\"logs\",\"_id\":\"1\"}}\n", "destructive"},
		{"DELETE", "/logs", "", "destructive"},
	} {
		args := []string{"-X", c.method, "-H", "Content-Type: application/json", es + c.path}
		if c.body != "" {
			args = append(args, "--data-binary", c.body)
		}
		_, ok := curl(args...)
		body := curlBody(args...)
		expect("curl Elasticsearch", c.method+" "+c.path, c.class, ok, body)
		if !allowed(mode, c.class) && !strings.Contains(body, "security_exception") {
			failures = append(failures, "Elasticsearch refusal is not a security_exception: "+body)
		}
	}
	for _, f := range failures {
		t.Error(f)
	}
	events, _ := g.ctl(t, "events", "--json")
	for _, canary := range []string{"canary-registry-secret-0001", "canary-clickhouse-secret-0002", "canary-elastic-secret-0003"} {
		if strings.Contains(seen.String(), canary) || strings.Contains(strings.Join(failures, "\n"), canary) || strings.Contains(events, canary) {
			t.Errorf("the real secret %s reached a client or the timeline", canary)
		}
	}
	if mode != "off" && !strings.Contains(events, `"type":"guardrails.block"`) {
		t.Errorf("no guardrails.block events under %s", mode)
	}
}
