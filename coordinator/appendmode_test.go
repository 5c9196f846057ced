package coordinator_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/events"
)

// Config.AppendMode on a real server: a batch renew of 256 leases derives
// 256 decisions in one fold, a backlog at once. AppendBatched appends them
// as atomic batches from that first backlog on (the measuring appender
// spends its first epoch one by one, so it would store them alone);
// AppendOneByOne never batches; both store the same decisions, every one
// verdict renewed.
func TestAppendMode(t *testing.T) {
	_, nc0, _ := newServer(t)
	if _, err := coordinator.New(coordinator.Config{ID: "c1", Conn: nc0, AppendMode: coordinator.AppendOneByOne + 1}); err == nil || !strings.Contains(err.Error(), "unknown append mode AppendMode(3)") {
		t.Fatalf("New with append mode 3: %v, want an unknown append mode error", err)
	}
	if _, err := coordinator.New(coordinator.Config{ID: "c1", Conn: nc0, AppendMode: coordinator.AppendBatched, AppendBatch: -1}); err == nil || !strings.Contains(err.Error(), "negative AppendBatch") {
		t.Fatalf("New batched but never batching: %v, want an error", err)
	}
	for _, tc := range []struct {
		mode    coordinator.AppendMode
		batched bool
	}{
		{coordinator.AppendBatched, true},
		{coordinator.AppendOneByOne, false},
	} {
		t.Run(fmt.Sprint(tc.mode), func(t *testing.T) {
			srv, _, js := newServer(t)
			r := startCoordinator(t, srv.ClientURL(), "c1", func(c *coordinator.Config) { c.AppendMode = tc.mode })
			waitCaughtUp(t, js, r)
			var b strings.Builder
			b.WriteString(`{"v":1,"leases":[`)
			for i := range events.MaxBatch {
				job := fmt.Sprintf("j%d", i)
				seq := publish(t, js, events.RoleWorker, "w1", job, events.VerbAcquire, `{"v":1,"lease_ms":600000}`)
				g := verdict(decisionsFor(t, js, seq))
				if g.Kind != events.KindGranted {
					t.Fatalf("acquire %s: %s/%s", job, g.Kind, g.Reason)
				}
				if i > 0 {
					b.WriteByte(',')
				}
				fmt.Fprintf(&b, `{"job":%q,"lease_id":%q,"generation":1,"renew_seq":1}`, job, g.Job.LeaseID)
			}
			b.WriteString(`]}`)
			seq := publish(t, js, events.RoleWorker, "w1", events.NoJob, events.VerbRenew, b.String())
			ds := decisionsFor(t, js, seq)
			if len(ds) != events.MaxBatch {
				t.Fatalf("%d decisions of the batch renew, want %d", len(ds), events.MaxBatch)
			}
			batched := 0
			for _, m := range readStream(t, js, "TENURE_OUT") {
				d, err := events.DecodeDecision(m.data)
				if err != nil {
					t.Fatal(err)
				}
				if d.Cause != seq {
					continue
				}
				if d.Kind != events.KindRenewed {
					t.Errorf("decision %d of the batch renew: %s/%s", d.N, d.Kind, d.Reason)
				}
				if m.header.Get("Nats-Batch-Id") != "" {
					batched++
				}
			}
			switch {
			case tc.batched && batched != events.MaxBatch:
				t.Errorf("AppendBatched: %d of the %d decisions stored in atomic batches, want all", batched, events.MaxBatch)
			case !tc.batched && batched != 0:
				t.Errorf("AppendOneByOne: %d decisions stored in atomic batches, want none", batched)
			}
		})
	}
}
