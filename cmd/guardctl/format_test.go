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
		// A VM-chosen name trying to forge a second, "allow" line and hide
		// the real verdict with a terminal escape.
		{Time: at, Type: audit.TypeFirewall, Action: "deny", Layer: "sni", Proto: "tcp", Port: 443,
			Host: "x\n2026-11-30 12:00:00  egress.firewall  allow l4 tcp exfil.example port 443\x1b[8m",
			Rule: &audit.Rule{Text: `"x\n..." is not a valid host name`, Origin: "invalidName"}},
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
	if strings.Count(b.String(), "\n") != len(events) || strings.Contains(b.String(), "\x1b") {
		t.Fatal("an event printed more than one line, or raw escape bytes")
	}
	if b.String() != string(want) {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}
