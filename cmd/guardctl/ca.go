package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newCACmd(c *cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ca",
		Short: "Show the workspace CA that the VM must trust",
		Long: `guardd intercepts TLS with a per-workspace CA, created in its state directory
on first run; its key never leaves the host. Put the certificate in the VM's
trust store, or point the usual variables at it:

  SSL_CERT_FILE  NODE_EXTRA_CA_CERTS  REQUESTS_CA_BUNDLE
  GIT_SSL_CAINFO  AWS_CA_BUNDLE  CURL_CA_BUNDLE`,
		Args: noArgs,
		RunE: helpAsUsageError,
	}
	path := &cobra.Command{
		Use:   "path",
		Short: "Print the path of the CA certificate on the host",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			ca, err := cl.CA(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintln(c.stdout, ca.Path)
			return nil
		},
	}
	export := &cobra.Command{
		Use:   "export",
		Short: "Print the CA certificate (PEM), to copy into the VM",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			ca, err := cl.CA(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprint(c.stdout, ca.PEM)
			return nil
		},
	}
	cmd.AddCommand(path, export)
	return cmd
}
