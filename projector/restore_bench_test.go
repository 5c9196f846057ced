package projector_test

import (
	"fmt"
	"testing"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/projector"
)

// BenchmarkRestore restores the snapshot of 100,000 leased jobs: the
// coordinator's restart path.
func BenchmarkRestore(b *testing.B) {
	const jobs = 100_000
	p := projector.New()
	for i := range jobs {
		in := events.Input{Role: events.RoleWorker, Actor: fmt.Sprint("w", i%64), Job: fmt.Sprint("job-", i), Verb: events.VerbAcquire, LeaseMS: 3600000}
		if _, err := p.Step(events.Raw{Seq: uint64(i + 1), Time: testutil.ScenarioBase + int64(i)*1000, Subject: events.InputSubject(in.Role, in.Actor, in.Job, in.Verb), Body: events.AppendInputBody(nil, &in)}); err != nil {
			b.Fatal(err)
		}
	}
	snap := p.Snapshot()
	b.SetBytes(int64(len(snap)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		q := projector.New()
		if err := q.Restore(snap); err != nil {
			b.Fatal(err)
		}
	}
}
