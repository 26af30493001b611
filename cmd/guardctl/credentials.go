package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func newCredentialsCmd(c *cli) *cobra.Command {
	var asJSON bool
	list := &cobra.Command{
		Use:   "list [--json]",
		Short: "Show the fake credentials to put in the VM (never the real ones)",
		Long: `guardctl credentials list shows each credential's fake: the value to write
into the VM's environment or config files in place of the real secret. guard
swaps it for the real one only on requests to the credential's hosts over
TLS; the fake sent anywhere else marks the workspace compromised. For AWS
the fake is an access key id and a secret access key.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			creds, err := cl.Credentials(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(c.stdout).Encode(creds)
			}
			if len(creds) == 0 {
				fmt.Fprintln(c.stdout, "the profile has no credentials")
				return nil
			}
			w := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tSERVICE\tHOSTS\tFAKE\tSTATE")
			for _, v := range creds {
				fake := v.Fake
				if v.FakeKeyID != "" {
					fake = v.FakeKeyID + " / " + v.Fake
				}
				state := "ready"
				if !v.Available {
					state = "real secret unavailable: " + v.Problem
				}
				if v.AskBeforeUse {
					state += ", asks before use"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", v.ID, v.Service, strings.Join(v.Hosts, ","), fake, state)
			}
			return w.Flush()
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd := &cobra.Command{Use: "credentials", Short: "The workspace's credentials, as the VM sees them", Args: noArgs, RunE: helpAsUsageError}
	cmd.AddCommand(list)
	return cmd
}

func newCompromiseCmd(c *cli) *cobra.Command {
	show := func(cmd *cobra.Command, clear bool) error {
		cl, err := c.client()
		if err != nil {
			return err
		}
		if clear {
			v, err := cl.ClearCompromise(cmd.Context())
			if err != nil {
				return err
			}
			if !v.Cleared {
				fmt.Fprintln(c.stdout, "the workspace was not marked compromised")
				return nil
			}
			fmt.Fprintf(c.stdout, "cleared: %s\n", v.Reason)
			return nil
		}
		v, err := cl.Compromise(cmd.Context())
		if err != nil {
			return err
		}
		if !v.Compromised {
			fmt.Fprintln(c.stdout, "not compromised")
			return nil
		}
		fmt.Fprintf(c.stdout, "compromised: %s\n", v.Reason)
		return silentError{}
	}
	cmd := &cobra.Command{
		Use:   "compromise [clear]",
		Short: "Show, or clear after looking, the workspace's compromise mark",
		Long: `A fake credential sent outside its scope marks the workspace compromised: every
later request is refused with 451 until a person has looked at the
credential.compromise event and runs guardctl compromise clear. Without clear,
it prints the mark and exits 1 when set.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return show(cmd, false) },
	}
	cmd.AddCommand(&cobra.Command{Use: "clear", Short: "Let requests through again", Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return show(cmd, true) }})
	return cmd
}
