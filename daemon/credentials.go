package daemon

import (
	"context"
	"os"
	"path/filepath"

	"guard/consent"
	"guard/control"
	"guard/proxy"
	"guard/workspace"
)

// proxyCredentials hands the store's credentials to the proxy's swapper;
// the real secret stays behind a function.
func proxyCredentials(s *workspace.Store) []*proxy.Credential {
	var out []*proxy.Credential
	for _, c := range s.Credentials() {
		pc := &proxy.Credential{ID: c.ID, Title: c.Title, Service: c.Service, Hosts: c.Hosts, Headers: c.Headers,
			AskBeforeUse: c.AskBeforeUse, Fake: c.Fake, FakeKeyID: c.FakeKeyID, Real: c.Real, RealKeyID: c.RealKeyID}
		if c.IsClientCert() {
			pc.ClientCert = c.ClientCert
		}
		out = append(out, pc)
	}
	return out
}

// useApprover asks the consent broker's use question for credentials
// marked askBeforeUse.
type useApprover struct{ d *Daemon }

func (u useApprover) ApproveUse(ctx context.Context, c *proxy.Credential, operation string) (bool, string) {
	prof, _ := u.d.currentProfile()
	dec := u.d.broker.Ask(ctx, consent.Question{Kind: consent.KindUse, Workspace: prof.Name, Scope: c.ID, Subject: c.Title, Operation: operation})
	return dec.Allow, dec.Reason
}

// Credentials lists the fakes for the VM (guardctl credentials list); the
// real values never leave the daemon.
func (d *Daemon) Credentials() []control.CredentialView {
	var out []control.CredentialView
	for _, c := range d.store.Credentials() {
		v := control.CredentialView{ID: c.ID, Title: c.Title, Service: c.Service, Hosts: c.Hosts,
			Fake: c.Fake, FakeKeyID: c.FakeKeyID, AskBeforeUse: c.AskBeforeUse, Available: true}
		if _, err := c.Real(); err != nil {
			v.Available, v.Problem = false, err.Error()
		}
		out = append(out, v)
	}
	return out
}

// Compromise says why the workspace is marked compromised, or "".
func (d *Daemon) Compromise() string { return d.swapper.Compromised() }

// compromiseFile keeps the compromise mark in the state dir.
const compromiseFile = "compromised"

// ClearCompromise lets requests through again (guardctl compromise clear).
func (d *Daemon) ClearCompromise() bool {
	os.Remove(filepath.Join(d.stateDir, compromiseFile))
	return d.swapper.ClearCompromise()
}
