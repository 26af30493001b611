package classify

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"testing"
)

func validClass(c Class) bool { return c == Read || c == Write || c == Destructive || c == Unknown }

// FuzzReceivePack feeds arbitrary push bodies: the classifier must not
// panic, must say why, and must leave the body replayable.
func FuzzReceivePack(f *testing.F) {
	files, _ := filepath.Glob("testdata/git/*.req")
	for _, name := range files {
		if b, err := os.ReadFile(name); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("0000"))
	f.Fuzz(func(t *testing.T, body []byte) {
		tee := &Tee{R: bytes.NewReader(body), Limit: 1 << 16}
		p := ReceivePack(tee)
		if !validClass(p.Class) || p.Reason == "" {
			t.Fatalf("%q: %+v", body, p)
		}
		rest := new(bytes.Buffer)
		rest.ReadFrom(tee.R)
		if len(body) <= 1<<16 && !bytes.Equal(append(tee.Buf.Bytes(), rest.Bytes()...), body) {
			t.Fatal("the body does not replay")
		}
		ReceivePackRefusal(p, "x blocked by guardrails")
	})
}

// FuzzSQL feeds arbitrary SQL: statements split and classify without a
// panic, and a DROP after a harmless statement is never missed.
func FuzzSQL(f *testing.F) {
	for _, s := range []string{"SELECT 1", "DROP TABLE t", "/* x */ (SELECT 1); TRUNCATE t", "SELECT ';' -- ;\nDELETE FROM t",
		"WITH a AS (SELECT 1) SELECT * FROM a", "ALTER TABLE t DROP COLUMN c", "select 'it''s'", "SELECT \"a\\\"b\""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		c, why := SQL(sql)
		if !validClass(c) || why == "" {
			t.Fatalf("%q: %s %q", sql, c, why)
		}
		if c2, _ := SQL("SELECT 1;\n" + sql + "\n;DROP TABLE t"); c2 != Destructive && !unterminated(sql) {
			t.Fatalf("a trailing DROP was missed after %q: %s", sql, c2)
		}
	})
}

// unterminated says sql leaves a quote or block comment open, which
// swallows whatever follows it (as ClickHouse would).
func unterminated(sql string) bool {
	count := func(text string) (n int) {
		scanStatements(text, func(stmt) { n++ })
		return n
	}
	return count(sql+"\n;SELECT 1") == count(sql)
}

// FuzzBulk feeds arbitrary _bulk bodies.
func FuzzBulk(f *testing.F) {
	f.Add([]byte("{\"index\":{}}\n{\"a\":1}\n{\"delete\":{\"_id\":\"1\"}}\n"))
	f.Add([]byte("{\"create\":{}}\n{}\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		c, why := bulk(body, false)
		if !validClass(c) || why == "" {
			t.Fatalf("%q: %s", body, c)
		}
		if bytes.Contains(body, []byte(`{"delete":`)) && bytes.HasPrefix(bytes.TrimSpace(body), []byte(`{"delete":`)) && c == Write {
			t.Fatalf("a leading delete action classified as a write: %q", body)
		}
	})
}

// FuzzAWS feeds arbitrary AWS request lines and bodies.
func FuzzAWS(f *testing.F) {
	f.Add("POST", "/", "", "DynamoDB_20120810.DeleteTable", "", "")
	f.Add("POST", "/", "", "", "application/x-www-form-urlencoded", "Action=TerminateInstances")
	f.Add("POST", "/service/S/operation/DeleteAlarms", "", "", "", "")
	f.Add("DELETE", "/bucket/key", "", "", "", "")
	f.Add("POST", "/", "delete", "", "", "")
	f.Fuzz(func(t *testing.T, method, path, query, target, ctype, body string) {
		h := http.Header{}
		h.Set("X-Amz-Target", target)
		h.Set("Content-Type", ctype)
		h.Set("Authorization", "AWS4-HMAC-SHA256 Credential=A/20261130/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=0")
		r := NewRequest(method, "s3.amazonaws.com", path, query, h)
		r.Body = []byte(body)
		op := AWS(r)
		if !validClass(op.Class) || op.Reason == "" {
			t.Fatalf("%+v", op)
		}
		if status, _, b := awsRefusal(r, "x blocked by guardrails"); status != 403 || len(b) == 0 {
			t.Fatal("no refusal")
		}
	})
}
