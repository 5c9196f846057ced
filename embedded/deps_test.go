package embedded_test

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/maknow/tenure/"

// natsServer is the prefix of every package of the nats-server module,
// whatever its major version.
const natsServer = "github.com/nats-io/nats-server/"

// workerSide are the packages a worker or an operator tool imports
// (DESIGN.md §2), and streams, which they share with the coordinator: none
// may link nats-server, directly or through another package. (The
// packages they import in turn, such as receipt, are checked with them.)
var workerSide = []string{"events", "follow", "verdict", "worker", "ops", "streams"}

// TestWorkerSideDoesNotLinkServer fails when a worker-side package depends
// on nats-server, naming the chain of imports that brings it in. It reads
// the import graph of the packages' non-test files (go list -deps), which
// is what a binary links.
func TestWorkerSideDoesNotLinkServer(t *testing.T) {
	roots := make([]string, len(workerSide))
	for i, p := range workerSide {
		roots[i] = module + p
	}
	graph := importGraph(t, append(roots, module+"embedded")...)

	// The check finds nats-server where it is: in this package.
	if chain := pathTo(graph, module+"embedded", natsServer); chain == nil {
		t.Fatalf("%sembedded does not depend on %s*: the check looks for the wrong packages", module, natsServer)
	}
	for _, root := range roots {
		if _, ok := graph[root]; !ok {
			t.Fatalf("go list did not list %s", root)
		}
		if chain := pathTo(graph, root, natsServer); chain != nil {
			t.Errorf("%s links nats-server: %s", root, strings.Join(chain, " -> "))
		}
	}
	// The worker does link the NATS client: the graph is the real one.
	if pathTo(graph, module+"worker", "github.com/nats-io/nats.go") == nil {
		t.Errorf("%sworker does not depend on nats.go: go list returned a partial graph", module)
	}
}

// importGraph is the import graph of pkgs and of everything they depend
// on: each package's non-test imports.
func importGraph(t *testing.T, pkgs ...string) map[string][]string {
	t.Helper()
	args := append([]string{"list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}"}, pkgs...)
	cmd := exec.Command("go", args...)
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	graph := make(map[string][]string)
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 {
			graph[f[0]] = f[1:]
		}
	}
	return graph
}

// pathTo is a shortest chain of imports from root to a package whose path
// starts with prefix, or nil if there is none.
func pathTo(graph map[string][]string, root, prefix string) []string {
	from := map[string]string{root: ""}
	queue := []string{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if strings.HasPrefix(p, prefix) {
			var chain []string
			for ; p != ""; p = from[p] {
				chain = append([]string{p}, chain...)
			}
			return chain
		}
		for _, imp := range graph[p] {
			if _, seen := from[imp]; !seen {
				from[imp] = p
				queue = append(queue, imp)
			}
		}
	}
	return nil
}

// TestWorkerSideLinksNoTraceExporter fails when a worker-side package
// links OpenTelemetry's SDK or an exporter (PROTOCOL.md §27): the SDKs
// use the OpenTelemetry API only, and record or export nothing unless
// the program installs a TracerProvider of its choice.
func TestWorkerSideLinksNoTraceExporter(t *testing.T) {
	roots := make([]string, len(workerSide))
	for i, p := range workerSide {
		roots[i] = module + p
	}
	graph := importGraph(t, roots...)
	for _, root := range roots {
		for _, banned := range []string{"go.opentelemetry.io/otel/sdk", "go.opentelemetry.io/otel/exporters"} {
			if chain := pathTo(graph, root, banned); chain != nil {
				t.Errorf("%s links %s: %s", root, banned, strings.Join(chain, " -> "))
			}
		}
	}
	// The API is linked: the graph is the real one.
	if pathTo(graph, module+"worker", "go.opentelemetry.io/otel/trace") == nil {
		t.Errorf("%sworker does not depend on the OpenTelemetry API: go list returned a partial graph", module)
	}
}
