// Command guardctl controls a running guardd and works with guard's files
// offline: rules, events, status and new profiles. See guardctl --help.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"guard/control"
)

// usageError marks a mistake in the command line (exit status 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// silentError is a failure already reported to the user (exit status 1).
type silentError struct{}

func (silentError) Error() string { return "" }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes guardctl and returns its exit status: 0 on success, 1 on a
// refused or failed operation, 2 on a usage error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	switch {
	case err == nil:
		return 0
	case errors.As(err, new(silentError)):
		return 1
	case errors.As(err, new(usageError)) || isCobraUsage(err):
		fmt.Fprintf(stderr, "guardctl: %v\nRun guardctl --help for usage.\n", err)
		return 2
	}
	fmt.Fprintf(stderr, "guardctl: %v\n", err)
	return 1
}

// isCobraUsage recognizes cobra's own command-line errors, which it does not
// type.
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "flag needs an argument",
		"invalid argument", "required flag", "accepts ", "requires at least", "if any flags in the group"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

// cli holds what every command shares.
type cli struct {
	stdout, stderr io.Writer
	control        string
}

func (c *cli) client() (*control.Client, error) {
	path, err := control.ResolveSocket(c.control)
	if err != nil {
		return nil, err
	}
	return control.NewClient(path), nil
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	c := &cli{stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:   "guardctl",
		Short: "Control guardd, guard's per-workspace egress firewall",
		Long: `guardctl controls a running guardd over its control socket, and checks rules
and writes profiles offline.

The control socket is found from --control, else $GUARD_CONTROL, else the one
running workspace under ~/.local/state/guard (or $XDG_STATE_HOME/guard).

Exit status: 0 on success, 1 on a refused or failed operation, 2 on a usage
error.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          noArgs,
		RunE:          helpAsUsageError,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().StringVar(&c.control, "control", "", "guardd's control socket (default: $GUARD_CONTROL, or the one running workspace)")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newRulesCmd(c), newEventsCmd(c), newStatusCmd(c), newProfileCmd(c), newCACmd(c), newPromptCmd(c), newApprovalsCmd(c), newClassifyCmd(c), newCredentialsCmd(c), newCompromiseCmd(c))
	return root
}

// noArgs rejects arguments on commands that take none, as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())}
	}
	return nil
}

func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageError{fmt.Errorf("%s needs %s", cmd.CommandPath(), what)}
		}
		return nil
	}
}

// helpAsUsageError makes a bare group command ("guardctl rules") print its
// help and exit 2.
func helpAsUsageError(cmd *cobra.Command, _ []string) error {
	cmd.Help()
	return usageError{fmt.Errorf("%s needs a subcommand", cmd.CommandPath())}
}
