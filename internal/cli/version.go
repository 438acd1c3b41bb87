package cli

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

func init() {
	register("version", "print the version of this binary", runVersion)
}

// version is set at link time (make build: -ldflags "-X
// github.com/promptops/promptops/internal/cli.version=..."); without it the
// module version from the build info is used (go install ...@v0.1.0).
var version = ""

// Version returns the binary's version: the link-time value, else the main
// module's version from the build info, else "(devel)".
func Version() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// revision returns the VCS revision recorded by go build, or "".
func revision() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			return s.Value
		}
	}
	return ""
}

// registerBuildInfo exports promptops_build_info{version,revision,goversion} = 1
// on the manager's metrics endpoint.
func registerBuildInfo() {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "promptops_build_info",
		Help: "1 for the version, VCS revision and Go version of the running promptops binary.",
	}, []string{"version", "revision", "goversion"})
	g.WithLabelValues(Version(), revision(), runtime.Version()).Set(1)
	_ = metrics.Registry.Register(g)
}

func runVersion(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("version", stdout, stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: promptops version\n\nPrints the version of this binary, its VCS revision and Go version.")
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return ExitInvalid
	}
	fmt.Fprintf(stdout, "promptops %s", Version())
	if r := revision(); r != "" {
		fmt.Fprintf(stdout, " (%s)", r)
	}
	fmt.Fprintf(stdout, " %s\n", runtime.Version())
	return ExitOK
}
