// Package testregistry is a real OCI registry (the distribution project's
// server, in memory, deletes enabled) for tests to push to and delete from.
package testregistry

import (
	"context"
	"io"
	"net/http"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/handlers"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/inmemory" // the storage it runs on
	"github.com/sirupsen/logrus"
)

// New returns the registry's handler.
func New() http.Handler {
	logrus.SetOutput(io.Discard)
	cfg := &configuration.Configuration{Storage: configuration.Storage{
		"inmemory":    configuration.Parameters{},
		"delete":      configuration.Parameters{"enabled": true},
		"maintenance": configuration.Parameters{"uploadpurging": map[any]any{"enabled": false}},
	}}
	cfg.Log.Level = "error"
	return handlers.NewApp(context.Background(), cfg)
}
