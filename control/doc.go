// Package control owns the control socket between guardd and guardctl: the
// request and response types, the HTTP server guardd runs on a unix socket
// in its state directory, and the client guardctl uses.
//
// The socket is HTTP/1.1 with JSON bodies; guardctl events --follow reads a
// stream of JSON lines. Access is limited by the socket's mode (0600, in a
// 0700 directory) and, where the OS tells, by the peer's user id, which must
// be guardd's own or root's.
//
//	GET  /v1/status                    Status
//	GET  /v1/rules                     RulesView
//	POST /v1/rules    ApplyRequest  →  ApplyResult, or 422 ErrorBody with Lines
//	POST /v1/check    CheckRequest  →  CheckResult
//	GET  /v1/events?follow=1&backlog=N →  audit.Event, one JSON object a line
//	GET  /v1/ca                        CAInfo
package control
