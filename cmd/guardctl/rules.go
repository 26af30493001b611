package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"guard/control"
	"guard/firewall"
	"guard/rules"
	"guard/workspace"
)

func newRulesCmd(c *cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rules",
		Short: "Apply, show and check egress rules",
		Args:  noArgs,
		RunE:  helpAsUsageError,
	}
	cmd.AddCommand(newRulesApplyCmd(c), newRulesShowCmd(c), newRulesCheckCmd(c))
	return cmd
}

// maxShownChanges bounds the +/- lines apply prints.
const maxShownChanges = 20

func newRulesApplyCmd(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "apply FILE",
		Short: "Validate a rules file and swap it into the running guardd",
		Long: `apply validates FILE and, if every line is good, swaps it into the running
guardd atomically: flows and requests that start afterwards see the new
policy, and nothing restarts. A file with errors is refused whole, each bad
line is reported as "Line N: ...", and the active policy stays.

The change lives until guardd stops or gets SIGHUP, which reloads the
profile's rules; to keep it, put it in the profile's rules file.`,
		Args: exactArgs(1, "a rules FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			text, err := workspace.ReadRulesFile(args[0])
			if err != nil {
				return err
			}
			// Validate locally first: the errors are the same, and a bad file
			// is reported even when guardd is not running.
			if _, err := rules.Parse(text); err != nil {
				return reportRulesErrors(c, args[0], err)
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			res, err := cl.ApplyRules(cmd.Context(), text, filepath.Base(args[0]))
			var rej *control.RejectedError
			if errors.As(err, &rej) && len(rej.Body.Lines) > 0 {
				for _, l := range rej.Body.Lines {
					fmt.Fprintln(c.stderr, l)
				}
				fmt.Fprintf(c.stderr, "guardctl: %s was not applied; the active policy is unchanged\n", args[0])
				return silentError{}
			}
			if err != nil {
				return err
			}
			printApplyResult(c, args[0], res)
			return nil
		},
	}
}

func reportRulesErrors(c *cli, file string, err error) error {
	var perr *rules.ParseError
	if !errors.As(err, &perr) {
		return err
	}
	for _, l := range perr.Lines() {
		fmt.Fprintln(c.stderr, l)
	}
	fmt.Fprintf(c.stderr, "guardctl: %s has %d bad lines; nothing was changed\n", file, len(perr.Errors)+perr.Omitted)
	return silentError{}
}

func printApplyResult(c *cli, file string, res control.ApplyResult) {
	plural := "s"
	if res.Rules == 1 {
		plural = ""
	}
	fmt.Fprintf(c.stdout, "applied %s: %d rule%s, default %s\n", file, res.Rules, plural, res.Default)
	if res.Unchanged() {
		fmt.Fprintln(c.stdout, "no change: the active policy was already this one")
		return
	}
	if res.Default != res.DefaultBefore {
		fmt.Fprintf(c.stdout, "  default %s -> %s\n", res.DefaultBefore, res.Default)
	}
	if res.Reordered {
		fmt.Fprintln(c.stdout, "  same rules in a new order (the first match wins, so verdicts may change)")
	}
	shown := 0
	for _, set := range []struct {
		sign  string
		lines []string
	}{{"+", res.Added}, {"-", res.Removed}} {
		for _, l := range set.lines {
			if shown == maxShownChanges {
				break
			}
			fmt.Fprintf(c.stdout, "  %s %s\n", set.sign, l)
			shown++
		}
	}
	if more := len(res.Added) + len(res.Removed) - shown; more > 0 {
		fmt.Fprintf(c.stdout, "  … and %d more changed rules\n", more)
	}
	fmt.Fprintf(c.stdout, "%d added, %d removed\n", len(res.Added), len(res.Removed))
}

func newRulesShowCmd(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "show",
		Short: "Print the active policy in canonical form",
		Long: `show prints the policy guardd is enforcing, in canonical form: the output is
itself a valid rules file. Rules guard places around it are shown as
comments at the top: first, the profile's local-inference exemption; last
(before the default), the refusal of QUIC, UDP port 443, which any rule of
yours can override.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			v, err := cl.Rules(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "# active since %s, from %s\n", v.Changed.Local().Format("2006-01-02 15:04:05"), safe(v.Source))
			for _, e := range v.Exemptions {
				fmt.Fprintf(c.stdout, "# always %s\n", safe(e))
			}
			fmt.Fprint(c.stdout, v.Text)
			return nil
		},
	}
}

func newRulesCheckCmd(c *cli) *cobra.Command {
	var (
		req       control.CheckRequest
		rulesFile string
		asJSON    bool
	)
	cmd := &cobra.Command{
		Use:   "check --proto tcp|udp [--host NAME]... [--ip ADDR] --port N [--method M]",
		Short: "Show the verdict for a flow, and the rule that decides it",
		Long: `check decides a flow the way guardd would and prints the verdict word first
(allow, deny or intercept), then the deciding rule ("line N: ...", the
profile's exemption, or the default). Nothing is recorded.

With --rules FILE it works offline on that file; otherwise it asks the
running guardd, whose policy includes the profile's exemptions.

A flow matches a rule when its IP or any --host matches. IPv4-mapped IPv6
addresses are treated as IPv4. With --method, the flow is a web request and
the verdict is whether that method may pass (allow or deny).

The exit status is 0 whatever the verdict; read the first word.`,
		Example: `  guardctl rules check --proto tcp --host api.github.com --port 443
  guardctl rules check --rules rules.pf --proto tcp --host api.internal --port 443 --method DELETE
  guardctl rules check --proto udp --ip 8.8.8.8 --port 53 --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			flow, err := req.Flow()
			if err != nil {
				return usageError{err}
			}
			var res control.CheckResult
			if rulesFile != "" {
				text, err := workspace.ReadRulesFile(rulesFile)
				if err != nil {
					return err
				}
				p, err := rules.Parse(text)
				if err != nil {
					return reportRulesErrors(c, rulesFile, err)
				}
				res = control.ResultOf(firewall.Compile(p).Verdict(flow))
			} else {
				cl, err := c.client()
				if err != nil {
					return err
				}
				if res, err = cl.Check(cmd.Context(), req); err != nil {
					return err
				}
			}
			if asJSON {
				enc := json.NewEncoder(c.stdout)
				return enc.Encode(res)
			}
			fmt.Fprintf(c.stdout, "%s %s\n", res.Verdict, res.Rule)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&rulesFile, "rules", "", "check against this rules file instead of the running guardd")
	f.StringVar(&req.Proto, "proto", "", "the flow's protocol: tcp or udp")
	f.StringArrayVar(&req.Hosts, "host", nil, "a name of the destination (SNI, Host, or a DNS name); repeatable")
	f.StringVar(&req.IP, "ip", "", "the destination IP address")
	f.IntVar(&req.Port, "port", 0, "the destination port")
	f.StringVar(&req.Method, "method", "", "an HTTP method: check a web request rather than a connection")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	cmd.MarkFlagRequired("proto")
	cmd.MarkFlagRequired("port")
	cmd.RegisterFlagCompletionFunc("proto", cobra.FixedCompletions([]string{"tcp", "udp"}, cobra.ShellCompDirectiveNoFileComp))
	cmd.RegisterFlagCompletionFunc("method", cobra.FixedCompletions([]string{"GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}
