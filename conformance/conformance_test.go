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
	adapterName = flag.String("adapter-name", os.Getenv("TENURE_CONFORMANCE_NAME"),
		"the subtest name of -adapter's run, TestConformance/<name>/<scenario> (TENURE_CONFORMANCE_NAME; default: the name -run gives that subtest, else ext)")
)

// externalName is the subtest name of the other adapter's run: the one
// given, else the one -run selects (-run TestConformance/ts/... runs it as
// ts), else ext.
func externalName() string {
	if *adapterName != "" {
		return *adapterName
	}
	if f := flag.Lookup("test.run"); f != nil {
		parts := strings.Split(f.Value.String(), "/")
		if len(parts) >= 2 && strings.Trim(parts[0], "^$") == "TestConformance" {
			name := strings.Trim(parts[1], "^$")
			if name != "" && name != "go" && !strings.ContainsAny(name, `.*+?()[]{}|\`) {
				return name
			}
		}
	}
	return "ext"
}

func TestDocs(t *testing.T) { testutil.RequireDocs(t, ".") }

// TestConformance plays every scenario against the Go SDK's adapter
// (TestConformance/go) and, if one is named, another adapter
// (TestConformance/<externalName()>).
func TestConformance(t *testing.T) {
	t.Run("go", func(t *testing.T) {
		bin := buildGoAdapter(t)
		conformance.Run(t, conformance.Adapter{Command: shellQuote(bin), Dir: ".."})
	})
	if *adapterCmd != "" {
		t.Run(externalName(), func(t *testing.T) {
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
