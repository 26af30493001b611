module guard

go 1.26.8

require (
	github.com/elazarl/goproxy v1.9.3
	github.com/spf13/cobra v1.10.2
	golang.org/x/net v0.62.0
	golang.org/x/sys v0.49.0
)

require (
	github.com/coder/websocket v1.8.15 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	golang.org/x/text v0.43.0 // indirect
)
