package schema

import (
	"testing"

	"github.com/maknow/tenure/internal/hostile"
)

// The corpus of hostile inputs (internal/hostile, which coordinator
// TestHostileInputs publishes to a coordinator): each case a schema can
// judge gets the corpus's reason from the decoder (or decodes, when its
// verdict is the fold's), and the schema agrees: it rejects every one whose
// reason is a schema matter and accepts those the decoder accepts. Left
// out: the cases whose reason no schema can see (a subject, a key twice,
// invalid UTF-8, an identity, a policy's comparison: reasonCoverage) and
// those whose fault is a rule only the decoder checks (Case.DecoderOnly;
// decoderOnlyRules has one of each). The lease id placeholders are
// replaced by lease ids of the right shape.
func TestHostileCatalogue(t *testing.T) {
	a := newAgreement(t, nil)
	names := map[string]bool{}
	for _, c := range hostile.Cases() {
		name := c.Cat + "/" + c.Name
		if names[name] {
			t.Fatalf("%s twice", name)
		}
		names[name] = true
		if c.DecoderOnly || c.Decode != "" && reasonCoverage[c.Decode].c == decoderOnly {
			continue
		}
		if r := a.check(name, c.Subject, hostile.Shaped.Expand(c.Body)); r != c.Decode {
			t.Errorf("%s: the decoder says %q, the corpus %q", name, r, c.Decode)
		}
	}
	if len(names) < 300 {
		t.Errorf("only %d cases", len(names))
	}
	a.done()
}
