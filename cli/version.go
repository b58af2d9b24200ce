package cli

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at build time by `make build` and `make install`:
// -ldflags "-X github.com/notifier/notifier/cli.version=v1.2.3". Left
// "dev", the build information's module version stands in for it (what
// `go install ./cmd/notifier` stamps from the repository's tags and
// revision).
var version = "dev"

// Every command reports the same version (run's heartbeat, the providers'
// User-Agent, the bench's report): resolved once, from the build.
func init() { version = Version() }

func versionCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version and build information",
		Long: `Version prints the notifier's version (the -ldflags -X version of make build and
make install, else the module version go install stamps), then the VCS revision
and time it was built from, the Go toolchain and the versions of the NATS and
Redis libraries built in.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bi, _ := debug.ReadBuildInfo()
			return printVersion(e.stdout, version, bi)
		},
	}
}

// Version is the notifier's version as `notifier version` prints it on
// its first line: the -ldflags -X version when one was set, else the
// build information's module version, else "dev".
func Version() string {
	bi, _ := debug.ReadBuildInfo()
	return versionOf(ldVersion, bi)
}

// ldVersion is version as the linker left it, before init resolved it.
var ldVersion = version

func versionOf(ld string, bi *debug.BuildInfo) string {
	switch {
	case ld != "" && ld != "dev":
		return ld
	case bi != nil && bi.Main.Version != "" && bi.Main.Version != "(devel)":
		return bi.Main.Version
	}
	return "dev"
}

// printVersion writes what `notifier version` prints: the version, then
// the build's revision, time and whether the tree was modified (when the
// toolchain stamped them), the Go version and platform, the module path,
// and the versions of the NATS and Redis libraries. bi may be nil.
func printVersion(w io.Writer, ld string, bi *debug.BuildInfo) error {
	fmt.Fprintf(w, "notifier %s\n", versionOf(ld, bi))
	if bi != nil {
		vcs := map[string]string{}
		for _, s := range bi.Settings {
			vcs[s.Key] = s.Value
		}
		if r := vcs["vcs.revision"]; r != "" {
			fmt.Fprintf(w, "  revision: %s\n", r)
			if t := vcs["vcs.time"]; t != "" {
				fmt.Fprintf(w, "  time:     %s\n", t)
			}
			if vcs["vcs.modified"] == "true" {
				fmt.Fprintf(w, "  modified: true (built from a tree with uncommitted changes)\n")
			}
		}
	}
	fmt.Fprintf(w, "  go:       %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if bi == nil {
		return nil
	}
	fmt.Fprintf(w, "  module:   %s %s\n", bi.Main.Path, bi.Main.Version)
	for _, d := range bi.Deps {
		switch d.Path {
		case "github.com/nats-io/nats.go", "github.com/redis/go-redis/v9", "github.com/nats-io/nats-server/v2":
			fmt.Fprintf(w, "  dep:      %s %s\n", d.Path, d.Version)
		}
	}
	_, err := fmt.Fprint(w)
	return err
}
