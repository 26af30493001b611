package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestClassifyCommand(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "kubeconfig"), []byte("apiVersion: v1\nkind: Config\nclusters:\n- name: dev\n  cluster:\n    server: https://kube.dev.test:6443\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "profile.json"), []byte(`{"name":"c","kubeconfigs":["kubeconfig"],
	  "guardrails":{"kubernetes":"destructive","db:ch.dev.test":"readOnly"}}`), 0o600)
	prof := filepath.Join(dir, "profile.json")
	for _, tc := range []struct {
		args  []string
		stdin string
		want  map[string]string // JSON fields
	}{
		{[]string{"--method", "DELETE", "--url", "https://api.github.com/repos/o/r"}, "",
			map[string]string{"service": "github", "class": "destructive"}},
		{[]string{"--profile", prof, "--method", "GET", "--url", "https://kube.dev.test:6443/api/v1/namespaces/d/pods/p/exec?command=sh"}, "",
			map[string]string{"service": "kubernetes", "scope": "kube:kube.dev.test", "class": "write", "mode": "destructive"}},
		{[]string{"--profile", prof, "--method", "POST", "--url", "http://ch.dev.test:8123/", "--body", "-"}, "TRUNCATE TABLE t",
			map[string]string{"service": "db:ch.dev.test", "class": "destructive", "mode": "readOnly"}},
		{[]string{"--method", "POST", "--url", "https://sts.amazonaws.com/", "--header", "Content-Type: application/x-www-form-urlencoded",
			"--header", "Authorization: AWS4-HMAC-SHA256 Credential=A/20261130/us-east-1/sts/aws4_request, SignedHeaders=host, Signature=0",
			"--body", "-"}, "Action=AssumeRole&RoleArn=x",
			map[string]string{"service": "aws", "class": "write", "detail": "sts:AssumeRole"}},
	} {
		var out, errOut bytes.Buffer
		root := newRoot(&out, &errOut)
		root.SetIn(strings.NewReader(tc.stdin))
		root.SetArgs(append([]string{"classify", "--json"}, tc.args...))
		if err := root.ExecuteContext(context.Background()); err != nil {
			t.Fatalf("%v: %v %s", tc.args, err, errOut.String())
		}
		var got map[string]any
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			t.Fatalf("%s", out.String())
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("%v: %s = %v, want %s (%s)", tc.args, k, got[k], v, out.String())
			}
		}
	}
	if code := run(context.Background(), []string{"classify", "--method", "GET"}, &bytes.Buffer{}, &bytes.Buffer{}); code != 2 {
		t.Errorf("missing --url: exit %d", code)
	}
}
