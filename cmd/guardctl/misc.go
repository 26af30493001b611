package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/spf13/cobra"

	"guard/audit"
	"guard/workspace"
)

func newEventsCmd(c *cli) *cobra.Command {
	var follow, asJSON bool
	cmd := &cobra.Command{
		Use:   "events [--follow] [--json]",
		Short: "Show the security timeline",
		Long: `events prints the recent events guardd holds in memory, oldest first: every
firewall decision, policy change, guardrail block, consent answer and
credential use. The full history is in events.jsonl in the state directory.

With --follow it prints the last 10 and then each new event as it happens,
until interrupted. With --json each event is one JSON object per line, the
same as the event log.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			print := func(e audit.Event) error {
				if asJSON {
					return json.NewEncoder(c.stdout).Encode(e)
				}
				_, err := fmt.Fprintln(c.stdout, formatEvent(e))
				return err
			}
			if follow {
				return cl.Follow(cmd.Context(), 10, print)
			}
			evs, err := cl.Events(cmd.Context())
			if err != nil {
				return err
			}
			for _, e := range evs {
				if err := print(e); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new events")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON lines")
	return cmd
}

// formatEvent is the one-line human form of an event.
func formatEvent(e audit.Event) string {
	var b strings.Builder
	b.WriteString(e.Time.Local().Format("2006-01-02 15:04:05"))
	b.WriteString("  ")
	b.WriteString(e.Type)
	switch e.Type {
	case audit.TypeFirewall:
		fmt.Fprintf(&b, "  %s %s %s", e.Action, e.Layer, e.Proto)
		dst := e.IP
		if e.Host != "" {
			dst = safe(e.Host)
			if e.IP != "" {
				dst += " (" + e.IP + ")"
			}
		}
		if e.Port != 0 {
			dst += fmt.Sprintf(" port %d", e.Port)
		}
		fmt.Fprintf(&b, " %s", strings.TrimSpace(dst))
		if e.Method != "" {
			fmt.Fprintf(&b, " %s", safe(e.Method))
		}
		if e.Rule != nil {
			switch e.Rule.Origin {
			case "rules":
				fmt.Fprintf(&b, "  by line %d: %s", e.Rule.Line, safe(e.Rule.Text))
			case "default":
				fmt.Fprintf(&b, "  by %s", safe(e.Rule.Text))
			default:
				fmt.Fprintf(&b, "  by %s: %s", safe(e.Rule.Origin), safe(e.Rule.Text))
			}
		}
	case audit.TypePolicyChange:
		fmt.Fprintf(&b, "  %s: %d rules, default %s", e.Source, e.Rules, e.Default)
		if e.Added+e.Removed > 0 {
			fmt.Fprintf(&b, " (+%d -%d)", e.Added, e.Removed)
		}
	}
	if e.Reason != "" {
		fmt.Fprintf(&b, "  [%s]", safe(e.Reason))
	}
	return b.String()
}

// safe returns text that came from the VM (or from any file) fit for a
// terminal line: quoted and escaped when it holds anything but printable
// characters, so a newline or an escape sequence cannot forge a line.
func safe(s string) string {
	for _, r := range s {
		if !unicode.IsPrint(r) || r == '"' {
			return strconv.Quote(s)
		}
	}
	return s
}

func newStatusCmd(c *cli) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status [--json]",
		Short: "Show what the running guardd is doing",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			s, err := cl.Status(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(c.stdout).Encode(s)
			}
			w := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintf(w, "workspace\t%s\n", s.Workspace)
			fmt.Fprintf(w, "guardd\tpid %d, up %s\n", s.PID, time.Since(s.Started).Round(time.Second))
			fmt.Fprintf(w, "profile\t%s\n", s.Profile)
			fmt.Fprintf(w, "state dir\t%s\n", s.StateDir)
			fmt.Fprintf(w, "control\t%s\n", s.Control)
			fmt.Fprintf(w, "rules\t%d rules, default %s (from %s, %s)\n", s.Rules, s.Default, s.RulesSource, s.RulesChanged.Local().Format("2006-01-02 15:04:05"))
			fmt.Fprintf(w, "events\t%d recorded, log %s\n", s.Events, s.EventLog)
			if len(s.Components) == 0 {
				fmt.Fprintf(w, "components\tnone (firewall and control socket only)\n")
			}
			for _, comp := range s.Components {
				fmt.Fprintf(w, "%s\t%s\n", comp.Name, comp.State)
			}
			for _, warn := range s.Warnings {
				fmt.Fprintf(w, "warning\t%s\n", warn)
			}
			return w.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newProfileCmd(c *cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "profile",
		Short: "Create workspace profiles",
		Args:  noArgs,
		RunE:  helpAsUsageError,
	}
	var dir string
	initCmd := &cobra.Command{
		Use:   "init NAME [--dir DIR]",
		Short: "Write a new workspace profile and a commented rules file",
		Long: `init writes DIR/profile.json (default DIR: ./NAME) with promptOnWrite for
every service, and DIR/rules.pf, a commented example rules file that the
profile uses. Existing files are never overwritten.`,
		Args: exactArgs(1, "a workspace NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			target := dir
			if target == "" {
				target = name
			}
			written, err := workspace.Init(target, name)
			if err != nil {
				return err
			}
			for _, p := range written {
				fmt.Fprintf(c.stdout, "wrote %s\n", p)
			}
			fmt.Fprintf(c.stdout, "next: edit %s, then run: guardd --profile %s\n",
				filepath.Join(target, "rules.pf"), filepath.Join(target, "profile.json"))
			return nil
		},
	}
	initCmd.Flags().StringVar(&dir, "dir", "", "directory to write into (default ./NAME)")
	cmd.AddCommand(initCmd)
	return cmd
}
