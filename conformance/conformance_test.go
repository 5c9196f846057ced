package conformance_test

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/maknow/tenure/conformance"
	"github.com/maknow/tenure/internal/testutil"
)

var (
	adapterCmd = flag.String("adapter", os.Getenv("TENURE_CONFORMANCE_ADAPTER"),
		"the command line of an adapter to run the scenarios against too, run by sh -c in the module's root (TENURE_CONFORMANCE_ADAPTER)")
	adapterName = flag.String("adapter-name", envOr("TENURE_CONFORMANCE_NAME", "ext"),
		"the subtest name of -adapter's run: TestConformance/<name>/<scenario> (TENURE_CONFORMANCE_NAME)")
)

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func TestDocs(t *testing.T) { testutil.RequireDocs(t, ".") }

// TestConformance plays every scenario against the Go SDK's adapter
// (TestConformance/go) and, if one is named, another adapter
// (TestConformance/<-adapter-name>).
func TestConformance(t *testing.T) {
	t.Run("go", func(t *testing.T) {
		bin := buildGoAdapter(t)
		conformance.Run(t, conformance.Adapter{Command: shellQuote(bin), Dir: ".."})
	})
	if *adapterCmd != "" {
		t.Run(*adapterName, func(t *testing.T) {
			conformance.Run(t, conformance.Adapter{Command: *adapterCmd, Dir: ".."})
		})
	}
}

// buildGoAdapter builds conformance/goadapter once for the test (with
// -race when the test runs with it): one binary for every scenario, not a
// go run each.
func buildGoAdapter(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "goadapter")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	goTool := filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	if _, err := os.Stat(goTool); err != nil || os.Getenv("GOROOT") == "" {
		goTool = "go"
	}
	cmd := exec.Command(goTool, append(args, "./goadapter")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./conformance/goadapter: %v\n%s", err, out)
	}
	return bin
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
