package modelcheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/maknow/tenure/events"
)

// TestDocs: this package and the reference model's have a doc comment,
// and so has every exported declaration. (testutil.RequireDocs does the
// same, but would link an embedded nats-server into this test.)
func TestDocs(t *testing.T) {
	for _, dir := range []string{".", "../leasemodel"} {
		requireDocs(t, dir)
	}
}

func requireDocs(t *testing.T, dir string) {
	fset := token.NewFileSet()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(names) == 0 {
		t.Fatalf("no Go files in %s: %v", dir, err)
	}
	doc := false
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		doc = doc || f.Doc != nil
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Name.IsExported() && d.Doc == nil {
					t.Errorf("%s: %s has no doc comment", fset.Position(d.Pos()), d.Name)
				}
			case *ast.GenDecl:
				for _, sp := range d.Specs {
					switch sp := sp.(type) {
					case *ast.TypeSpec:
						if sp.Name.IsExported() && d.Doc == nil && sp.Doc == nil {
							t.Errorf("%s: %s has no doc comment", fset.Position(sp.Pos()), sp.Name)
						}
					case *ast.ValueSpec:
						for _, n := range sp.Names {
							if n.IsExported() && d.Doc == nil && sp.Doc == nil {
								t.Errorf("%s: %s has no doc comment", fset.Position(n.Pos()), n)
							}
						}
					}
				}
			}
		}
	}
	if !doc {
		t.Errorf("the package in %s has no doc comment", dir)
	}
}

// TestTenureDoesNotLinkChecker: the checker is development tooling; the
// binary never links it.
func TestTenureDoesNotLinkChecker(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/maknow/tenure/cmd/tenure").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 {
		t.Fatalf("go list returned too little: %d packages", len(deps))
	}
	for _, d := range deps {
		if strings.HasPrefix(d, "github.com/maknow/tenure/internal/modelcheck") {
			t.Errorf("cmd/tenure links %s", d)
		}
	}
}

// reached are decisions each scope of the set go test runs must reach, so
// that a scope that quietly stopped reaching them (a move dropped, a
// policy changed) fails instead of checking less.
var reached = map[string][]Outcome{
	"ci-lease": {
		{events.VerbAcquire, events.KindGranted, events.ReasonOk},
		{events.VerbOffer, events.KindOffered, events.ReasonOk},
		{events.VerbAck, events.KindAcked, events.ReasonOk},
		{events.VerbAck, events.KindLate, events.ReasonAckAfterDeadline},
		{events.VerbRenew, events.KindRenewed, events.ReasonOk},
		{events.VerbRenew, events.KindRenewed, events.ReasonCappedByLifetime},
		{events.VerbRenew, events.KindLostAuthority, events.ReasonRenewAfterExpiry},
		{events.VerbRenew, events.KindLostAuthority, events.ReasonStaleGeneration},
		{events.VerbRenew, events.KindDuplicate, events.ReasonDuplicateRenew},
		{events.VerbRenew, events.KindLate, events.ReasonLateRenew},
		{events.VerbRenew, events.KindLostAuthority, events.ReasonCancelRequested},
		{events.VerbProgress, events.KindProgressed, events.ReasonOk},
		{events.VerbProgress, events.KindLate, events.ReasonLateProgress},
		{events.VerbProgress, events.KindRejected, events.ReasonSequenceReused},
		{events.VerbResult, events.KindCompleted, events.ReasonOk},
		{events.VerbResult, events.KindStale, events.ReasonStaleGeneration},
		{events.VerbResult, events.KindRejected, events.ReasonSuccessAfterCancel},
		{events.VerbResult, events.KindConflict, events.ReasonOwnershipConflict},
		{events.VerbResult, events.KindConflict, events.ReasonConflictPending},
		{events.VerbCancel, events.KindCancelRequested, events.ReasonOk},
		{events.VerbCancel, events.KindCancelRequested, events.ReasonOfferWithdrawn},
		{events.VerbCancelAck, events.KindCancelAcked, events.ReasonOk},
		{events.VerbResolve, events.KindResolved, events.ReasonConflictAffirmed},
		{events.VerbResolve, events.KindResolved, events.ReasonLeaseRevoked},
		{events.VerbResolve, events.KindResolved, events.ReasonSettled},
		{events.VerbTick, events.KindExpired, events.ReasonLeaseExpired},
		{events.VerbTick, events.KindAckMissed, events.ReasonAckDeadlinePassed},
		{events.VerbTick, events.KindUnresolved, events.ReasonCancelTimeout},
		{events.VerbTick, events.KindUnresolved, events.ReasonExpiredCancelUnreconciled},
		{events.VerbAcquire, events.KindRejected, events.ReasonMaxGenerations},
	},
	"ci-queue": {
		{events.VerbSubmit, events.KindSubmitted, events.ReasonOk},
		{events.VerbPull, events.KindAssigned, events.ReasonOk},
		{events.VerbTick, events.KindRequeued, events.ReasonAckDeadlinePassed},
		{events.VerbTick, events.KindWithdrawn, events.ReasonAckDeadlinePassed},
		{events.VerbRelease, events.KindRequeued, events.ReasonOfferDeclined},
		{events.VerbResult, events.KindRequeued, events.ReasonAttemptFailed},
		{events.VerbCancel, events.KindCancelRequested, events.ReasonDequeued},
	},
	"ci-limits": {
		{events.VerbLimit, events.KindLimitSet, events.ReasonOk},
		{events.VerbLimit, events.KindAssigned, events.ReasonOk},
		{events.VerbResult, events.KindAssigned, events.ReasonOk},
		{events.VerbPull, events.KindAssigned, events.ReasonOk},
	},
	"ci-retain": {
		{events.VerbTick, events.KindRetired, events.ReasonRetentionPassed},
		{events.VerbResult, events.KindLostAuthority, events.ReasonNoSuchJob},
		{events.VerbPolicy, events.KindPolicySet, events.ReasonOk},
	},
}

// TestCheck runs the scopes of the "ci" set: no rule may be broken, and
// each scope must reach what it is there to reach.
func TestCheck(t *testing.T) {
	scopes, err := Lookup("ci")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range scopes {
		t.Run(s.Name, func(t *testing.T) {
			r, err := Run(s, Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Log(r.Summary())
			for i := range r.Violations {
				t.Errorf("%s(the findings, open and closed: TESTING.md)", r.Violations[i].String())
			}
			if r.Depth != s.Depth {
				t.Errorf("explored to depth %d of %d", r.Depth, s.Depth)
			}
			want, ok := reached[s.Name]
			if !ok {
				t.Fatalf("no outcomes listed for scope %s", s.Name)
			}
			for _, o := range want {
				if r.Coverage[o] == 0 {
					t.Errorf("scope %s never reached %s", s.Name, o)
				}
			}
		})
	}
}

// TestSmallScopeCounts pins the size of a small scope: a change of the
// moves, of the state identity or of the fold that changes how many
// states there are shows here, to be looked at.
func TestSmallScopeCounts(t *testing.T) {
	s := scopes["ci-lease"]
	s.Depth = 3
	r, err := Run(s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.States != 289 || r.Transitions != 6359 || len(r.Violations) != 0 {
		t.Errorf("%s, want states=289 transitions=6359 violations=0", r.Summary())
	}
}

func TestLookup(t *testing.T) {
	for _, name := range Names() {
		if _, err := Lookup(name); err != nil {
			t.Errorf("Lookup(%q): %v", name, err)
		}
	}
	if _, err := Lookup("nope"); err == nil {
		t.Error("Lookup of an unknown scope succeeded")
	}
	bad := scopes["ci-lease"]
	bad.Jobs = []string{"a", "b", "c", "d"}
	if _, err := Run(bad, Options{}); err == nil {
		t.Error("Run of a scope with 4 jobs succeeded")
	}
}
