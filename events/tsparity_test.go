package events

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The TypeScript SDK's decision kinds (sdk/ts/src/protocol.ts: the Kind
// union, and which are accepted and derived) are this package's: a kind
// added here and not there would be a verdict the TypeScript SDK cannot
// tell from a derived decision (limit_set was missing until revision 10).
func TestTypeScriptKinds(t *testing.T) {
	src, err := os.ReadFile("../sdk/ts/src/protocol.ts")
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	section := func(start, end string) []string {
		i := strings.Index(s, start)
		if i < 0 {
			t.Fatalf("protocol.ts has no %q", start)
		}
		j := strings.Index(s[i:], end)
		var out []string
		for _, m := range regexp.MustCompile(`"([a-z_]+)"`).FindAllStringSubmatch(s[i:i+j], -1) {
			out = append(out, m[1])
		}
		slices.Sort(out)
		return out
	}
	var all, accepted, derived []string
	for _, k := range Kinds() {
		all = append(all, k.String())
		if k.Accepted() {
			accepted = append(accepted, k.String())
		}
		if k.Derived() {
			derived = append(derived, k.String())
		}
	}
	slices.Sort(all)
	slices.Sort(accepted)
	slices.Sort(derived)
	for _, c := range []struct {
		name       string
		start, end string
		want       []string
	}{
		{"Kind", "export type Kind =", "\n\nconst", all},
		{"acceptedKinds", "const acceptedKinds", "]);", accepted},
		{"derivedKinds", "const derivedKinds", "]);", derived},
	} {
		if got := section(c.start, c.end); !slices.Equal(got, c.want) {
			t.Errorf("protocol.ts %s:\n %v\nevents:\n %v", c.name, got, c.want)
		}
	}
}
