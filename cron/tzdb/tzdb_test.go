package tzdb_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/maknow/tenure/cron/tzdb"
	"github.com/maknow/tenure/internal/testutil"
)

func TestRule(t *testing.T) {
	for name, want := range map[string]string{
		"Europe/Berlin":    "CET-1CEST,M3.5.0,M10.5.0/3",
		"America/New_York": "EST5EDT,M3.2.0,M11.1.0",
		"Asia/Kolkata":     "IST-5:30",
		"UTC":              "UTC0",
	} {
		got, err := tzdb.Rule(name)
		if err != nil || got != want {
			t.Errorf("Rule(%q) = %q, %v; want %q", name, got, err, want)
		}
	}
	// A name is a path inside the database, never outside it.
	for _, name := range []string{"", "/etc/passwd", "../../../etc/passwd", "Europe/../../etc/passwd", "Europe/Berlin\x00", "Nowhere/Atlantis", strings.Repeat("A", 65)} {
		if _, err := tzdb.Rule(name); !errors.Is(err, tzdb.ErrUnknown) {
			t.Errorf("Rule(%q) = %v, want ErrUnknown", name, err)
		}
	}
}

// The Go installation's zoneinfo.zip stands in for a host without a
// database: $ZONEINFO names one that holds nothing.
func TestRuleFromTheToolchain(t *testing.T) {
	t.Setenv("ZONEINFO", t.TempDir())
	if got, err := tzdb.Rule("Australia/Sydney"); err != nil || got != "AEST-10AEDT,M10.1.0,M4.1.0/3" {
		t.Errorf("Rule = %q, %v", got, err)
	}
}

func TestResolve(t *testing.T) {
	z, rule, err := tzdb.Resolve("Europe/London")
	if err != nil || rule != "GMT0BST,M3.5.0/1,M10.5.0" || z.String() != rule {
		t.Errorf("Resolve(Europe/London) = %v, %q, %v", z, rule, err)
	}
	// Not a name, but a rule.
	if _, rule, err := tzdb.Resolve("<+0545>-5:45"); err != nil || rule != "<+0545>-5:45" {
		t.Errorf("Resolve(a rule) = %q, %v", rule, err)
	}
	if _, _, err := tzdb.Resolve("Mars/Olympus"); !errors.Is(err, tzdb.ErrUnknown) {
		t.Errorf("Resolve(Mars/Olympus) = %v", err)
	}
}

func TestFooterRefusals(t *testing.T) {
	good, err := os.ReadFile(filepath.Join("/usr/share/zoneinfo", "Europe/Berlin"))
	if err != nil {
		t.Skip("no /usr/share/zoneinfo here:", err) // TestRuleFromTheToolchain covers the zip
	}
	if rule, err := tzdb.Footer(good); err != nil || rule != "CET-1CEST,M3.5.0,M10.5.0/3" {
		t.Fatalf("Footer = %q, %v", rule, err)
	}
	v1 := append([]byte{}, good...)
	v1[4] = 0
	for name, data := range map[string][]byte{
		"empty":          nil,
		"not TZif":       []byte(strings.Repeat("x", 100)),
		"version 1":      v1,
		"truncated":      good[:60],
		"no footer":      good[:len(good)-len("\nCET-1CEST,M3.5.0,M10.5.0/3\n")],
		"unterminated":   good[:len(good)-1],
		"huge counts":    append(append([]byte("TZif2"), make([]byte, 15)...), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}...),
		"only a header":  good[:44],
		"garbage footer": append(append([]byte{}, good[:len(good)-len("CET-1CEST,M3.5.0,M10.5.0/3\n")]...), '\n'),
	} {
		if rule, err := tzdb.Footer(data); err == nil {
			t.Errorf("%s: Footer = %q, want a refusal", name, rule)
		}
	}
}

func FuzzFooter(f *testing.F) {
	if good, err := os.ReadFile("/usr/share/zoneinfo/Europe/Berlin"); err == nil {
		f.Add(good)
	}
	f.Add([]byte("TZif2"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = tzdb.Footer(data) // never panics
	})
}

func TestDocs(t *testing.T) { testutil.RequireDocs(t, ".") }
