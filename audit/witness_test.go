package audit_test

import (
	"context"
	"crypto/sha256"
	"strconv"
	"strings"
	"testing"

	"github.com/maknow/tenure/audit"
	"github.com/maknow/tenure/events"
)

// Every kind of witness, borne out or not, against a log that replays
// cleanly: only the witnesses the log does not bear out are findings, each
// naming its origin and sequence.
func TestWitnesses(t *testing.T) {
	e := newEnv(t, memTopology)
	inputs := publishWorkload(t, e, -1, input{})
	e.appendDecisions(t, derive(t, inputs))
	decs := e.readStream(t, e.top.DecisionStream())
	if r := e.audit(t, audit.Config{}); !r.OK() {
		t.Fatalf("the log is not clean:\n%s", summary(r))
	}
	in3 := inputs[2]
	d4 := decs[3]
	chain4, ok := events.ParseChain(d4.header.Get(events.HeaderChain))
	if !ok {
		t.Fatal("decision 4 carries no chain value")
	}
	cause4 := headerCause(t, d4.header.Get(events.HeaderCause))
	lastIn, lastDec := inputs[len(inputs)-1].seq, decs[len(decs)-1].seq
	other := chain4
	other[0] ^= 1
	ws := []audit.Witness{
		{Origin: "ok-input", Kind: audit.WitnessInput, Seq: in3.seq, Subject: in3.subject, BodyHash: sha256.Sum256(in3.data)},
		{Origin: "ok-decision", Kind: audit.WitnessDecision, Seq: d4.seq, Chain: chain4, Cause: cause4},
		{Origin: "subject", Kind: audit.WitnessInput, Seq: in3.seq, Subject: in3.subject + "x", BodyHash: sha256.Sum256(in3.data)},
		{Origin: "body", Kind: audit.WitnessInput, Seq: in3.seq, Subject: in3.subject, BodyHash: sha256.Sum256([]byte("{}"))},
		{Origin: "lost-input", Kind: audit.WitnessInput, Seq: lastIn + 1, Subject: in3.subject},
		{Origin: "chain", Kind: audit.WitnessDecision, Seq: d4.seq, Chain: other},
		{Origin: "cause", Kind: audit.WitnessDecision, Seq: d4.seq, Chain: chain4, Cause: cause4 + 1},
		{Origin: "lost-decision", Kind: audit.WitnessDecision, Seq: lastDec + 2, Chain: chain4},
	}
	r := e.audit(t, audit.Config{Options: audit.Options{Witnesses: ws}})
	w := r.Witnesses
	if w.Given != len(ws) || w.Confirmed != 2 || w.Findings.Count != 6 || r.Problems() != 6 {
		t.Fatalf("witnesses %+v, problems %d:\n%s", w, r.Problems(), summary(r))
	}
	want := map[string]string{
		"subject":       "input 3 is tenure.in.",
		"body":          "has another body in the log",
		"lost-input":    "is not in the log: the input stream ends at",
		"chain":         "decision 4 has chain value " + chain4.String(),
		"cause":         "decision 4 answers input",
		"lost-decision": "is not in the log: the decision stream ends at",
	}
	for _, f := range w.Findings.Items {
		if !strings.Contains(f.Problem, want[f.Origin]) || want[f.Origin] == "" {
			t.Errorf("%s: %q, want %q", f.Origin, f.Problem, want[f.Origin])
		}
		delete(want, f.Origin)
	}
	if len(want) != 0 {
		t.Errorf("no finding for %v", want)
	}
	if !strings.Contains(summary(r), "witnesses:   8 given, 2 confirmed, 6 not borne out by the log") {
		t.Errorf("summary:\n%s", summary(r))
	}
	// Witnesses need the whole log.
	if _, err := runAudit(e, audit.Config{From: 5, Options: audit.Options{Witnesses: ws}}); err == nil {
		t.Error("witnesses with --from accepted")
	}
}

func headerCause(t *testing.T, s string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("cause header %q", s)
	}
	return n
}

func runAudit(e *env, cfg audit.Config) (*audit.Report, error) {
	cfg.JS, cfg.Topology = e.js, e.top
	return audit.Run(context.Background(), cfg)
}
