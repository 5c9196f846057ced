// Command modelcheck runs the exhaustive check of the lease rules
// (internal/modelcheck) over the fold and prints, for each scope, the
// number of distinct states, the transitions and the depth reached, then
// every violation found with the shortest input sequence that reaches it.
// It exits 1 when a violation was found, 2 on bad usage. `make check` runs
// it; `tenure` never links it.
//
//	go run ./internal/modelcheck/cmd/modelcheck [-scope check] [-depth N] [-stop] [-continuous] [-v] [-coverage]
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"strings"

	"github.com/maknow/tenure/internal/modelcheck"
)

func main() {
	scope := flag.String("scope", "check", "a scope or a set of scopes: "+strings.Join(modelcheck.Names(), ", "))
	depth := flag.Int("depth", 0, "explore to this depth instead of the scope's")
	stop := flag.Bool("stop", false, "stop at the depth of the first violation")
	verbose := flag.Bool("v", false, "print a line per depth explored")
	coverage := flag.Bool("coverage", false, "print the decisions reached, by verb, kind and reason")
	continuous := flag.Bool("continuous", false, "step every transition on a projector that folded the whole log (no restore) too")
	flag.Parse()
	scopes, err := modelcheck.Lookup(*scope)
	if err != nil || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "modelcheck:", err, flag.Args())
		os.Exit(2)
	}
	// Many small, short-lived values: trade some memory for time, within
	// a bound, on a machine shared with other work.
	debug.SetGCPercent(300)
	debug.SetMemoryLimit(512 << 20)
	o := modelcheck.Options{Stop: *stop}
	if *verbose {
		o.Log = os.Stdout
	}
	failed := false
	for _, s := range scopes {
		if *depth > 0 {
			s.Depth = *depth
		}
		if *continuous {
			s.Continuous = true
		}
		fmt.Println("modelcheck scope", s)
		r, err := modelcheck.Run(s, o)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Println(r.Summary())
		if *coverage {
			fmt.Print(r.CoverageTable())
		}
		for i := range r.Violations {
			fmt.Println(r.Violations[i].String())
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}
