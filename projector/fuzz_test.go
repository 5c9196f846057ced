package projector_test

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/projector"
)

// fuzzLog parses a fuzz input as a log of stored inputs, one per line:
// "<delta ms> <subject suffix> <body>". Lines that do not parse are skipped.
func fuzzLog(data string) []events.Raw {
	var raws []events.Raw
	now := testutil.ScenarioBase
	for _, line := range strings.Split(data, "\n") {
		f := strings.SplitN(line, " ", 3)
		if len(f) != 3 {
			continue
		}
		d, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || d < -1e7 || d > 1e10 {
			continue
		}
		now += d * 1e6
		raws = append(raws, events.Raw{Seq: uint64(len(raws) + 1), Time: now, Subject: "tenure.in." + f[1], Body: []byte(f[2])})
	}
	return raws
}

// FuzzFold folds arbitrary logs: no panic, every decision valid and
// re-decodable, one verdict per input at least, and the fold deterministic
// across straight replay and snapshot/restore.
func FuzzFold(f *testing.F) {
	f.Add("0 worker.w1.j1.acquire {\"v\":1,\"lease_ms\":1000}\n500 worker.w1.j1.renew {\"v\":1,\"lease_id\":\"L1\",\"generation\":1,\"renew_seq\":1}\n2000 coord.c._.tick {\"v\":1}")
	f.Add("0 ops.d.j1.offer {\"v\":1,\"holder\":\"w1\"}\n1 worker.w1.j1.ack {\"v\":1,\"lease_id\":\"L1\",\"generation\":1}\n1 worker.w2.j1.progress {\"v\":1,\"lease_id\":\"L1\",\"generation\":1,\"progress_seq\":3,\"value\":5}\n1 ops.d.j1.resolve {\"v\":1,\"action\":\"revoke\"}")
	f.Add("0 ops.d.j1.offer {\"v\":1,\"holder\":\"w1\",\"lease_ms\":200}\n1 worker.w1.j1.ack {\"v\":1,\"lease_id\":\"L1\",\"generation\":1}\n1 ops.d.j1.cancel {}\n-5 worker.w1.j1.cancel_ack {\"v\":1,\"lease_id\":\"L1\",\"generation\":1}\n900 worker.w1.j1.result {\"v\":1,\"lease_id\":\"L1\",\"generation\":1,\"outcome\":\"CANCELLED\"}")
	f.Add("0 worker.w1._.renew {\"v\":1,\"leases\":[{\"job\":\"a\",\"lease_id\":\"L1\",\"generation\":1,\"renew_seq\":1}]}\n0 bogus {\"v\":1}\n0 worker.w1.j1.ack {\"v\":1,\"v\":1}")
	f.Fuzz(func(t *testing.T, data string) {
		raws := fuzzLog(data)
		var first [][]byte
		p := projector.New()
		for _, raw := range raws {
			ds, err := p.Step(raw)
			if err != nil {
				t.Fatal(err)
			}
			verdicts := 0
			for i := range ds {
				d := &ds[i]
				if !d.Reason.Known() {
					t.Fatalf("unknown reason %q", d.Reason)
				}
				if !d.Kind.Derived() {
					verdicts++
				}
				b := events.AppendDecision(nil, d)
				back, err := events.DecodeDecision(b)
				if err != nil {
					t.Fatalf("decision does not decode: %v\n%s", err, b)
				}
				if b2 := events.AppendDecision(nil, &back); !bytes.Equal(b, b2) {
					t.Fatalf("decision does not round-trip:\n%s\n%s", b, b2)
				}
				first = append(first, b)
			}
			if verdicts == 0 {
				t.Fatalf("input #%d got no verdict", raw.Seq)
			}
		}
		// Replay with a snapshot/restore half way: same decisions, same hash.
		q := projector.New()
		var k int
		for i, raw := range raws {
			if i == len(raws)/2 {
				r := projector.New()
				if err := r.Restore(q.Snapshot()); err != nil {
					t.Fatal(err)
				}
				q = r
			}
			ds, _ := q.Step(raw)
			for i := range ds {
				if b := events.AppendDecision(nil, &ds[i]); !bytes.Equal(b, first[k]) {
					t.Fatalf("replay differs at decision %d:\n%s\n%s", k, b, first[k])
				}
				k++
			}
		}
		if q.StateHash() != p.StateHash() {
			t.Fatal("state hash differs after replay")
		}
	})
}
