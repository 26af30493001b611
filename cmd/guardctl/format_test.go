package main

import (
	"flag"
	"os"
	"strings"
	"testing"
	"time"

	"guard/audit"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestFormatEventGolden(t *testing.T) {
	time.Local = time.UTC // formatEvent prints local time
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	events := []audit.Event{
		{Time: at, Type: audit.TypeFirewall, Action: "deny", Layer: "l4", Proto: "tcp", IP: "10.0.0.1", Port: 22,
			Rule: &audit.Rule{Line: 5, Text: "deny any 10.0.0.0/8", Origin: "rules"}},
		{Time: at, Type: audit.TypeFirewall, Action: "intercept", Layer: "sni", Proto: "tcp", Host: "api.example.com", IP: "192.0.2.1", Port: 443,
			Rule: &audit.Rule{Line: 2, Text: "allow web api.example.com GET,POST", Origin: "rules"}},
		{Time: at, Type: audit.TypeFirewall, Action: "deny", Layer: "http", Proto: "tcp", Host: "api.internal", Port: 443, Method: "DELETE",
			Rule: &audit.Rule{Text: "default deny", Origin: "default"}},
		{Time: at, Type: audit.TypeFirewall, Action: "allow", Layer: "l4", Proto: "tcp", IP: "127.0.0.1", Port: 11434,
			Rule: &audit.Rule{Text: "allow tcp 127.0.0.1:11434", Origin: "localInference"}},
		{Time: at, Type: audit.TypePolicyChange, Source: "guardctl rules apply", Rules: 3, Default: "deny", Added: 1, Removed: 2, Reason: "new.rules"},
		{Time: at, Type: audit.TypePolicyChange, Source: "start", Rules: 5, Default: "deny"},
	}
	var b strings.Builder
	for _, e := range events {
		b.WriteString(formatEvent(e) + "\n")
	}
	const path = "testdata/events.golden"
	if *update {
		os.WriteFile(path, []byte(b.String()), 0o644)
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if b.String() != string(want) {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}
