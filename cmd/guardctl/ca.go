package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"guard/control"
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
	// show prints one part of the CA that guardd reports.
	show := func(use, short string, part func(control.CAInfo) string) *cobra.Command {
		return &cobra.Command{
			Use:   use,
			Short: short,
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
				fmt.Fprint(c.stdout, part(ca))
				return nil
			},
		}
	}
	path := show("path", "Print the path of the CA certificate on the host", func(ca control.CAInfo) string { return ca.Path + "\n" })
	export := show("export", "Print the CA certificate (PEM), to copy into the VM", func(ca control.CAInfo) string { return ca.PEM })
	cmd.AddCommand(path, export)
	return cmd
}
