package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"guard/consent"
)

// The consent part of the API. A prompter holds GET /v1/consent/stream
// open: it is attached while the stream lasts, and the stream is one JSON
// consent.Update per line, starting with every question already waiting.
// It answers with POST /v1/consent/answer. GET /v1/approvals lists the
// grants and remembered denials; POST /v1/approvals/revoke ends one or all.

// AnswerRequest answers a waiting question.
type AnswerRequest struct {
	ID     string `json:"id"`
	Choice string `json:"choice"`
}

// AnswerResult is the decision the answer made.
type AnswerResult struct {
	Allow  bool   `json:"allow"`
	Choice string `json:"choice,omitempty"`
	Reason string `json:"reason"`
}

// RevokeRequest ends the approval ID, or all of them.
type RevokeRequest struct {
	ID  string `json:"id,omitempty"`
	All bool   `json:"all,omitempty"`
}

// RevokeResult says how many approvals ended.
type RevokeResult struct {
	Revoked int `json:"revoked"`
}

func (s *Server) consentStream(w http.ResponseWriter, r *http.Request) {
	p := s.backend.Consent().Attach()
	defer p.Detach()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	flusher, _ := w.(http.Flusher)
	for {
		select {
		case <-r.Context().Done():
			return
		case u, ok := <-p.Updates():
			if !ok {
				return // dropped for falling behind: the client reconnects
			}
			if err := enc.Encode(u); err != nil {
				return
			}
			if flusher != nil && len(p.Updates()) == 0 {
				flusher.Flush()
			}
		}
	}
}

func (s *Server) consentAnswer(w http.ResponseWriter, r *http.Request) {
	var req AnswerRequest
	if err := decodeBody(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	d, err := s.backend.Consent().Answer(r.Context(), req.ID, req.Choice)
	switch {
	case errors.Is(err, consent.ErrNotPending):
		writeError(w, http.StatusConflict, err)
	case err != nil:
		writeError(w, http.StatusBadRequest, err)
	default:
		writeJSON(w, http.StatusOK, AnswerResult{Allow: d.Allow, Choice: d.Choice, Reason: d.Reason})
	}
}

func (s *Server) approvals(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.backend.Consent().Approvals())
}

func (s *Server) revoke(w http.ResponseWriter, r *http.Request) {
	var req RevokeRequest
	if err := decodeBody(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	b := s.backend.Consent()
	switch {
	case req.All == (req.ID != ""):
		writeError(w, http.StatusBadRequest, errors.New("give either an approval id or all"))
	case req.All:
		writeJSON(w, http.StatusOK, RevokeResult{Revoked: b.RevokeAll()})
	default:
		if err := b.Revoke(req.ID); err != nil {
			writeError(w, http.StatusNotFound, err)
			return
		}
		writeJSON(w, http.StatusOK, RevokeResult{Revoked: 1})
	}
}

// ConsentStream attaches as a prompter and calls fn with each update
// until ctx ends, fn fails, or guardd stops. Ending it detaches: with no
// other prompter, the questions on screen are denied.
func (c *Client) ConsentStream(ctx context.Context, fn func(consent.Update) error) error {
	resp, err := c.send(ctx, http.MethodGet, "/v1/consent/stream", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var u consent.Update
		if err := json.Unmarshal(sc.Bytes(), &u); err != nil {
			return fmt.Errorf("guardd sent a bad update: %w", err)
		}
		if err := fn(u); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("consent stream: %w", err)
	}
	return errors.New("guardd ended the consent stream")
}

// Answer answers the waiting question id with a choice id.
func (c *Client) Answer(ctx context.Context, id, choice string) (AnswerResult, error) {
	var r AnswerResult
	return r, c.do(ctx, http.MethodPost, "/v1/consent/answer", AnswerRequest{ID: id, Choice: choice}, &r)
}

// Approvals lists the grants and remembered denials.
func (c *Client) Approvals(ctx context.Context) ([]consent.Grant, error) {
	var g []consent.Grant
	return g, c.do(ctx, http.MethodGet, "/v1/approvals", nil, &g)
}

// Revoke ends approval id, or every approval when all is set.
func (c *Client) Revoke(ctx context.Context, id string, all bool) (RevokeResult, error) {
	var r RevokeResult
	return r, c.do(ctx, http.MethodPost, "/v1/approvals/revoke", RevokeRequest{ID: id, All: all}, &r)
}
