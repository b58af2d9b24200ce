package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at build time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

func versionCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version and build information",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(e.stdout, "notifier %s\n", version)
			fmt.Fprintf(e.stdout, "  go:       %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
			if bi, ok := debug.ReadBuildInfo(); ok {
				fmt.Fprintf(e.stdout, "  module:   %s\n", bi.Main.Path)
				for _, s := range bi.Settings {
					switch s.Key {
					case "vcs.revision", "vcs.time", "vcs.modified":
						fmt.Fprintf(e.stdout, "  %-9s %s\n", s.Key[4:]+":", s.Value)
					}
				}
				for _, d := range bi.Deps {
					switch d.Path {
					case "github.com/nats-io/nats.go", "github.com/redis/go-redis/v9", "github.com/nats-io/nats-server/v2":
						fmt.Fprintf(e.stdout, "  dep:      %s %s\n", d.Path, d.Version)
					}
				}
			}
			return nil
		},
	}
}
