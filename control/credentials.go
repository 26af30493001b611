package control

import (
	"context"
	"net/http"
)

// CredentialView is a credential as the VM's side may see it: its fakes,
// never its real value.
type CredentialView struct {
	ID           string   `json:"id"`
	Title        string   `json:"title"`
	Service      string   `json:"service"`
	Hosts        []string `json:"hosts"`
	Fake         string   `json:"fake"`
	FakeKeyID    string   `json:"fakeKeyId,omitempty"`
	AskBeforeUse bool     `json:"askBeforeUse,omitempty"`
	Available    bool     `json:"available"`
	Problem      string   `json:"problem,omitempty"`
}

// CompromiseView is the workspace's compromise state.
type CompromiseView struct {
	Compromised bool   `json:"compromised"`
	Reason      string `json:"reason,omitempty"`
	Cleared     bool   `json:"cleared,omitempty"`
}

func (s *Server) credentials(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.backend.Credentials())
}

func (s *Server) compromise(w http.ResponseWriter, r *http.Request) {
	reason := s.backend.Compromise()
	writeJSON(w, http.StatusOK, CompromiseView{Compromised: reason != "", Reason: reason})
}

func (s *Server) clearCompromise(w http.ResponseWriter, r *http.Request) {
	reason := s.backend.Compromise()
	writeJSON(w, http.StatusOK, CompromiseView{Reason: reason, Cleared: s.backend.ClearCompromise()})
}

// Credentials lists the workspace's credentials with their fakes.
func (c *Client) Credentials(ctx context.Context) ([]CredentialView, error) {
	var v []CredentialView
	return v, c.do(ctx, http.MethodGet, "/v1/credentials", nil, &v)
}

// ClearCompromise clears the workspace's compromise mark.
func (c *Client) ClearCompromise(ctx context.Context) (CompromiseView, error) {
	var v CompromiseView
	return v, c.do(ctx, http.MethodPost, "/v1/compromise/clear", nil, &v)
}

// Compromise reads the workspace's compromise mark.
func (c *Client) Compromise(ctx context.Context) (CompromiseView, error) {
	var v CompromiseView
	return v, c.do(ctx, http.MethodGet, "/v1/compromise", nil, &v)
}
