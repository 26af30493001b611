package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"guard/classify"
	"guard/consent"
	"guard/workspace"
)

// classification is what guardctl classify prints.
type classification struct {
	Known     bool              `json:"known"`
	Kind      string            `json:"kind,omitempty"`
	Service   string            `json:"service,omitempty"`
	Scope     string            `json:"scope,omitempty"`
	Class     string            `json:"class,omitempty"`
	Detail    string            `json:"detail,omitempty"`
	Reason    string            `json:"reason,omitempty"`
	Decisions map[string]string `json:"decisions,omitempty"`
	// Mode is the profile's mode for the service, when a profile was given.
	Mode string `json:"mode,omitempty"`
}

func newClassifyCmd(c *cli) *cobra.Command {
	var (
		profile, method, rawURL, bodyFile string
		headers                           []string
		asJSON                            bool
	)
	cmd := &cobra.Command{
		Use:   "classify [--profile FILE] --method M --url URL [--header 'K: V']... [--body FILE|-] [--json]",
		Short: "Show how guard classifies a request, and what each write policy does with it",
		Long: `guardctl classify runs guard's classifiers on one request given on the command
line, without a running guardd: it prints the service, the consent scope, the
class (read, write, destructive or unknown), the operation as a prompt would
show it, and the decision under each of the four modes. With --profile the
profile's kubeconfigs, registries and databases are known too, and its mode
for the service is shown. A git-receive-pack body (--body) is classified as a
push: deletions and pushes that are not provably fast-forwards are
destructive.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if method == "" || rawURL == "" {
				return usageError{fmt.Errorf("classify needs --method and --url")}
			}
			u, err := url.Parse(rawURL)
			if err != nil || u.Host == "" {
				return usageError{fmt.Errorf("--url %q is not an absolute URL", rawURL)}
			}
			h := http.Header{}
			for _, kv := range headers {
				k, v, ok := strings.Cut(kv, ":")
				if !ok {
					return usageError{fmt.Errorf("--header %q: want 'Name: value'", kv)}
				}
				h.Add(strings.TrimSpace(k), strings.TrimSpace(v))
			}
			var body []byte
			switch bodyFile {
			case "":
			case "-":
				body, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), classify.MaxPushPrefix+1))
			default:
				body, err = readLimitedFile(bodyFile, classify.MaxPushPrefix+1)
			}
			if err != nil {
				return fmt.Errorf("--body: %w", err)
			}
			services := &classify.Services{}
			var prof *workspace.Profile
			if profile != "" {
				if prof, err = workspace.LoadFile(profile); err != nil {
					return err
				}
				if services, err = prof.Services(); err != nil {
					return err
				}
			}
			res := classifyRequest(services, strings.ToUpper(method), u, h, body)
			if prof != nil && res.Known {
				res.Mode = string(prof.Mode(res.Service))
			}
			if asJSON {
				return json.NewEncoder(c.stdout).Encode(res)
			}
			printClassification(c.stdout, res)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&profile, "profile", "", "a workspace profile, for its kubeconfigs, registries, databases and modes")
	f.StringVar(&method, "method", "", "the HTTP method")
	f.StringVar(&rawURL, "url", "", "the request's absolute URL")
	f.StringArrayVar(&headers, "header", nil, "a request header, 'Name: value' (repeatable)")
	f.StringVar(&bodyFile, "body", "", "a file with the request body, or - for stdin")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// classifyRequest does what the proxy's guardrails hook does, without the
// policy: route, read the body if the classifier wants it, classify.
func classifyRequest(s *classify.Services, method string, u *url.URL, h http.Header, body []byte) classification {
	host := strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		port = 443
		if u.Scheme == "http" {
			port = 80
		}
	}
	rt, ok := s.Route(host, port)
	if !ok {
		return classification{Known: false, Reason: "no classifier knows " + host + ": guard passes it untouched, and the rules still apply"}
	}
	req := classify.NewRequest(method, host, u.Path, u.RawQuery, h)
	var op classify.Operation
	switch {
	case classify.IsReceivePack(rt, req):
		p := classify.ReceivePack(bytes.NewReader(body))
		op = classify.Operation{Service: rt.Service, Scope: rt.Scope, Class: p.Class, Reason: p.Reason, Detail: p.Detail(u.Path)}
	default:
		if classify.NeedsBody(rt, req) {
			req.Body, req.Truncated = body, len(body) > classify.MaxBody
			if req.Truncated {
				req.Body = body[:classify.MaxBody]
			}
		}
		op = classify.Classify(rt, req)
	}
	res := classification{Known: true, Kind: string(rt.Kind), Service: op.Service, Scope: op.Scope,
		Class: string(op.Class), Detail: op.Detail, Reason: op.Reason, Decisions: map[string]string{}}
	for _, m := range []consent.Mode{consent.Off, consent.PromptOnWrite, consent.Destructive, consent.ReadOnly} {
		res.Decisions[string(m)] = string(consent.Decide(m, op.Class))
	}
	return res
}

func printClassification(out io.Writer, res classification) {
	if !res.Known {
		fmt.Fprintln(out, res.Reason)
		return
	}
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "service\t%s (%s)\n", res.Service, res.Kind)
	fmt.Fprintf(w, "scope\t%s\n", res.Scope)
	fmt.Fprintf(w, "class\t%s\n", res.Class)
	fmt.Fprintf(w, "operation\t%s\n", res.Detail)
	fmt.Fprintf(w, "because\t%s\n", res.Reason)
	for _, m := range []string{"off", "promptOnWrite", "destructive", "readOnly"} {
		mark := ""
		if m == res.Mode {
			mark = "   <- this profile"
		}
		fmt.Fprintf(w, "%s\t%s%s\n", m, res.Decisions[m], mark)
	}
	w.Flush()
}

func readLimitedFile(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit))
}
