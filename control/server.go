package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"syscall"
	"time"

	"guard/audit"
	"guard/consent"
	"guard/firewall"
	"guard/rules"
)

// Backend is what the control server needs from guardd.
type Backend interface {
	Status() Status
	ActiveRules() RulesView
	// ApplyRules validates and swaps in a new policy. A *rules.ParseError
	// means the text was rejected and nothing changed.
	ApplyRules(ctx context.Context, text []byte, source string) (ApplyResult, error)
	Check(f firewall.Flow) firewall.Verdict
	Events() *audit.Log
	CA() CAInfo
	Consent() *consent.Broker
	Credentials() []CredentialView
	Compromise() string
	ClearCompromise() bool
}

// maxRequestBytes bounds a request body; rules files are the largest.
const maxRequestBytes = 17 << 20

// Server serves the control API.
type Server struct {
	backend Backend
	logger  *slog.Logger
	http    *http.Server
}

// NewServer returns a server for b.
func NewServer(b Backend, logger *slog.Logger) *Server {
	s := &Server{backend: b, logger: logger}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", s.status)
	mux.HandleFunc("GET /v1/rules", s.rules)
	mux.HandleFunc("POST /v1/rules", s.apply)
	mux.HandleFunc("POST /v1/check", s.check)
	mux.HandleFunc("GET /v1/events", s.events)
	mux.HandleFunc("GET /v1/ca", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, s.backend.CA()) })
	mux.HandleFunc("GET /v1/consent/stream", s.consentStream)
	mux.HandleFunc("POST /v1/consent/answer", s.consentAnswer)
	mux.HandleFunc("GET /v1/approvals", s.approvals)
	mux.HandleFunc("POST /v1/approvals/revoke", s.revoke)
	mux.HandleFunc("GET /v1/credentials", s.credentials)
	mux.HandleFunc("GET /v1/compromise", s.compromise)
	mux.HandleFunc("POST /v1/compromise/clear", s.clearCompromise)
	s.http = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	return s
}

// Serve answers requests on ln until ctx ends, then stops: open event
// streams end, and requests in flight get a few seconds to finish.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	s.http.BaseContext = func(net.Listener) context.Context { return ctx }
	errc := make(chan error, 1)
	go func() { errc <- s.http.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.http.Shutdown(shutdownCtx); err != nil {
		s.http.Close()
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, ErrorBody{Error: err.Error()})
}

func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, maxRequestBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("bad request body: %w", err)
	}
	return nil
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.backend.Status())
}

func (s *Server) rules(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.backend.ActiveRules())
}

func (s *Server) apply(w http.ResponseWriter, r *http.Request) {
	var req ApplyRequest
	if err := decodeBody(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	res, err := s.backend.ApplyRules(r.Context(), []byte(req.Text), req.Source)
	var perr *rules.ParseError
	switch {
	case errors.As(err, &perr):
		writeJSON(w, http.StatusUnprocessableEntity, ErrorBody{Error: "the rules were not applied; the active policy is unchanged", Lines: perr.Lines()})
	case err != nil:
		writeError(w, http.StatusInternalServerError, err)
	default:
		writeJSON(w, http.StatusOK, res)
	}
}

func (s *Server) check(w http.ResponseWriter, r *http.Request) {
	var req CheckRequest
	if err := decodeBody(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	f, err := req.Flow()
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	writeJSON(w, http.StatusOK, ResultOf(s.backend.Check(f)))
}

func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	log := s.backend.Events()
	q := r.URL.Query()
	if q.Get("follow") == "" {
		writeJSON(w, http.StatusOK, log.Recent(0))
		return
	}
	backlog := 10
	if b := q.Get("backlog"); b != "" {
		n, err := strconv.Atoi(b)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, fmt.Errorf("backlog %q is not a count", b))
			return
		}
		backlog = n
	}
	recent, sub := log.Follow(backlog, 1024)
	defer sub.Close()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	flusher, _ := w.(http.Flusher)
	flush := func() {
		if flusher != nil {
			flusher.Flush()
		}
	}
	for _, e := range recent {
		enc.Encode(e)
	}
	flush()
	for {
		select {
		case <-r.Context().Done():
			return
		case e, ok := <-sub.Events():
			if !ok {
				return
			}
			if d := sub.TakeDropped(); d > 0 {
				enc.Encode(audit.Event{Time: time.Now().UTC(), Type: "events.dropped",
					Reason: fmt.Sprintf("%d events were not shown because this reader fell behind; the event log has them", d)})
			}
			if err := enc.Encode(e); err != nil {
				return
			}
			flush()
		}
	}
}

// Listen creates the control socket at path with mode 0600. A stale socket
// left by a crashed guardd is replaced; a live one is an error, since two
// guardd must not share a workspace.
func Listen(path string) (net.Listener, error) {
	if st, err := os.Lstat(path); err == nil {
		if st.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("control socket %s exists and is not a socket; remove it", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("control socket %s is in use: another guardd is running for this workspace", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale control socket: %w", err)
		}
	}
	// Create the socket 0600 from the start (umask), not just after a
	// chmod, in case --control points outside the 0700 state dir.
	old := syscall.Umask(0o077)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	return &peerCheckListener{Listener: ln}, nil
}

// peerCheckListener refuses connections from other users where the OS can
// say who the peer is; the socket's mode is the first line of defence.
type peerCheckListener struct {
	net.Listener
}

func (l *peerCheckListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		uid, err := peerUID(c)
		if err == nil && (uid == os.Getuid() || uid == 0) {
			return c, nil
		}
		// Not the owner, or the kernel would not say: refuse.
		c.Close()
	}
}
