package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"guard/consent"
)

func newApprovalsCmd(c *cli) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "approvals [list | revoke ID | revoke-all]",
		Short: "List and revoke the answers guardd remembers (grants and denials)",
		Long: `guardctl approvals lists what the consent prompts granted or denied and guardd
still remembers: write grants per scope, credential-use grants, and denials,
with the time left. A revoked approval takes effect on the next request, which
is asked again.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return listApprovals(cmd, c, asJSON) },
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	list := &cobra.Command{
		Use:   "list [--json]",
		Short: "List the active grants and remembered denials",
		Args:  noArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return listApprovals(cmd, c, asJSON) },
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	revoke := &cobra.Command{
		Use:   "revoke ID",
		Short: "End one approval; its scope is asked again",
		Args:  exactArgs(1, "an approval id (guardctl approvals list shows them)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			if _, err := cl.Revoke(cmd.Context(), args[0], false); err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "revoked %s\n", args[0])
			return nil
		},
	}
	revokeAll := &cobra.Command{
		Use:   "revoke-all",
		Short: "End every approval",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			r, err := cl.Revoke(cmd.Context(), "", true)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "revoked %d approval(s)\n", r.Revoked)
			return nil
		},
	}
	cmd.AddCommand(list, revoke, revokeAll)
	return cmd
}

func listApprovals(cmd *cobra.Command, c *cli, asJSON bool) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	grants, err := cl.Approvals(cmd.Context())
	if err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(c.stdout).Encode(grants)
	}
	printApprovals(c.stdout, grants, time.Now())
	return nil
}

// printApprovals is the table guardctl approvals shows.
func printApprovals(out io.Writer, grants []consent.Grant, now time.Time) {
	if len(grants) == 0 {
		fmt.Fprintln(out, "no approvals: every write under a prompting policy will be asked")
		return
	}
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tANSWER\tKIND\tSCOPE\tWORKSPACE\tLEFT")
	for _, g := range grants {
		answer := "allow"
		if !g.Allow {
			answer = "deny"
		}
		left := "rest of session"
		if !g.Until.IsZero() {
			left = g.Until.Sub(now).Round(time.Second).String()
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", g.ID, answer, g.Kind, g.Scope, g.Workspace, left)
	}
	w.Flush()
}
