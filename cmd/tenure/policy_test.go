package main

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/maknow/tenure/events"
)

// tenure policy changes only the fields it is given and keeps the others
// as they are in force (it used to send the protocol defaults for every
// field not given); tenure policy show prints the policy in force, each
// field with its value and unit. Against a real tenure serve.
func TestPolicyChangesOnlyTheFieldsGiven(t *testing.T) {
	log, _ := serveArgs(t, "--data", t.TempDir(), "--listen", "127.0.0.1:-1", "--sync", "interval")
	url := waitLog(t, log, regexp.MustCompile(`connect workers to (nats://127\.0\.0\.1:\d+)`))
	waitLog(t, log, regexp.MustCompile(`(INF live|msg=live) `))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := func(want int, args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		args = append(args, "--nats-url", url)
		if code := run(ctx, args, &out, &errOut); code != want {
			t.Fatalf("tenure %s: exit %d, want %d:\n%s%s", strings.Join(args, " "), code, want, out.String(), errOut.String())
		}
		return out.String()
	}
	showJSON := func() events.Policy {
		t.Helper()
		var w struct {
			Min, Max, Def, Ack, Cancel, Life, Retain int64
			Gens                                     uint64
		}
		line := cmd(0, "policy", "show", "--json")
		for _, f := range []struct {
			name string
			v    any
		}{{"min_lease_ms", &w.Min}, {"max_lease_ms", &w.Max}, {"default_lease_ms", &w.Def}, {"ack_timeout_ms", &w.Ack},
			{"cancel_timeout_ms", &w.Cancel}, {"max_lifetime_ms", &w.Life}, {"max_generations", &w.Gens}, {"retain_ms", &w.Retain}} {
			var m map[string]json.RawMessage
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("policy show --json printed %q: %v", line, err)
			}
			if raw, ok := m[f.name]; ok {
				if err := json.Unmarshal(raw, f.v); err != nil {
					t.Fatal(err)
				}
			} else if f.name != "retain_ms" {
				t.Fatalf("policy show --json lacks %s: %s", f.name, line)
			}
		}
		const ms = int64(time.Millisecond)
		return events.Policy{MinLease: w.Min * ms, MaxLease: w.Max * ms, DefaultLease: w.Def * ms, AckTimeout: w.Ack * ms,
			CancelTimeout: w.Cancel * ms, MaxLifetime: w.Life * ms, MaxGenerations: w.Gens, Retain: w.Retain * ms}
	}

	// The coordinator appended the defaults as input 2; its decision may
	// be stored a little after the coordinator logs that it is live (on
	// two loaded cores, policy show read the stream before it).
	out := cmd(0, "policy", "show")
	for deadline := time.Now().Add(15 * time.Second); !strings.Contains(out, "set by input 2 at ") && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		out = cmd(0, "policy", "show")
	}
	for _, want := range []string{"set by input 2 at ", "FIELD", "VALUE", "ON THE WIRE",
		"min-lease        100ms          min_lease_ms=100\n",
		"max-lease        1h0m0s         max_lease_ms=3600000\n",
		"cancel-timeout   1m0s           cancel_timeout_ms=60000\n",
		"max-generations  1000 leases    max_generations=1000\n",
		"retain           0 (for ever)   retain_ms=0\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("policy show lacks %q:\n%s", want, out)
		}
	}
	if got := showJSON(); got != events.DefaultPolicy() {
		t.Fatalf("policy show --json: %+v, want the defaults", got)
	}

	out = cmd(0, "policy", "--cancel-timeout", "2m", "--retain", "1h", "--max-generations", "7")
	if !strings.Contains(out, "policy_set ok") {
		t.Fatalf("policy: %s", out)
	}
	// Only --max-lease: the cancel timeout, retention and generations set
	// above stay as they are.
	cmd(0, "policy", "--max-lease", "20m")
	want := events.DefaultPolicy()
	want.CancelTimeout, want.Retain, want.MaxGenerations = int64(2*time.Minute), int64(time.Hour), 7
	want.MaxLease = int64(20 * time.Minute)
	if got := showJSON(); got != want {
		t.Fatalf("after policy --max-lease 20m the policy in force is\n%+v, want\n%+v", got, want)
	}
	out = cmd(0, "policy", "show")
	for _, want := range []string{"set by input 4 at ", "max-lease        20m0s          max_lease_ms=1200000\n", "cancel-timeout   2m0s           cancel_timeout_ms=120000\n", "retain           1h0m0s         retain_ms=3600000\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("policy show lacks %q:\n%s", want, out)
		}
	}
	// A merged policy the coordinator refuses is its verdict (exit 1), and
	// the policy in force stays.
	if out := cmd(1, "policy", "--default-lease", "30m"); !strings.Contains(out, "bad_policy") {
		t.Errorf("default above max: %s", out)
	}
	if got := showJSON(); got != want {
		t.Fatalf("a refused policy changed the policy in force: %+v", got)
	}
	// No field given is a usage error; show takes no field.
	cmd(2, "policy")
	cmd(2, "policy", "show", "--max-lease", "1m")
}
