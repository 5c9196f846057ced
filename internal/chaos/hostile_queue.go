package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/streams"
)

// queueMode announces 256 slots on the honest workers' queue (a pull whose
// announcement lapses when the attack ends) and, for as long as the attack
// lasts (a lease and 600 ms, at least 1.2 s), refuses every offer the
// queue makes it, by mode: queue-decline releases the offer while it is
// OFFERED; queue-release ACKs it and releases the lease; queue-noack never
// ACKs it (its ACK deadline passes); queue-expire ACKs it and never renews
// (the lease expires). It announces again whenever its announcement is
// withdrawn, as a hostile worker would. Under rules revision 5 each
// refusal costs it its standing (withdrawn decisions with the refusal's
// reason and its strikes: fewer offers, then none while held), never a
// job's attempts but an expiry's, and never ends a job (PROTOCOL.md
// §22.8): the checks (checkQueues) require every queue job to complete,
// once, by an honest worker, and the hostile worker's refusals to be
// followed by a withdrawal with a strike.
func (h *hostile) queueMode(ctx context.Context, rec *AttackRecord, typ string) {
	p := &QueueProbe{Queue: h.queue}
	rec.Queue = p
	if h.queue == "" {
		rec.note("no queue to attack")
		return
	}
	rec.Targets = []string{h.queue}
	deadline := time.Now().Add(max(1200*time.Millisecond, h.cfg.Lease+600*time.Millisecond))
	out := streams.Topology{}.DecisionStream()
	name := events.WorkerConsumerName(h.cfg.ID, events.WorkerConsumers-1)
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_ = h.js.DeleteConsumer(cctx, out, name)
	cons, err := h.js.CreateConsumer(cctx, out, jetstream.ConsumerConfig{
		Name: name, FilterSubject: events.AddresseeFilter(h.cfg.ID), AckPolicy: jetstream.AckNonePolicy,
		DeliverPolicy: jetstream.DeliverNewPolicy, InactiveThreshold: time.Minute, MemoryStorage: true, Replicas: 1,
	})
	cancel()
	if err != nil {
		rec.note("consumer: " + err.Error())
		return
	}
	var fs []jetstream.PubAckFuture
	var announced time.Time
	announce := func() {
		ttl := time.Until(deadline).Milliseconds()
		if ttl < 1 || time.Since(announced) < 100*time.Millisecond {
			return
		}
		announced = time.Now()
		p.Announced++
		fs = append(fs, h.publish(rec, h.subject(events.NoJob, "pull"), fmt.Appendf(nil, `{"v":1,"queue":%q,"slots":%d,"ttl_ms":%d}`, h.queue, events.MaxSlots, ttl), h.msgID()))
	}
	announce()
	for time.Now().Before(deadline) && ctx.Err() == nil {
		nctx, ncancel := context.WithDeadline(ctx, deadline)
		m, err := cons.Next(jetstream.FetchContext(nctx))
		ncancel()
		if err != nil {
			if time.Now().Before(deadline) && ctx.Err() == nil {
				rec.note("decisions: " + err.Error())
				time.Sleep(50 * time.Millisecond)
			}
			continue
		}
		rec.Pulled++
		d, err := events.DecodeDecision(m.Data())
		if err != nil || d.Addressee != h.cfg.ID {
			continue
		}
		if s := d.Standing; s != nil && s.Queue == h.queue {
			p.MaxStrikes = max(p.MaxStrikes, s.Strikes)
		}
		switch {
		case d.Kind == events.KindWithdrawn:
			p.Withdrawn++
			rec.note("withdrawn/" + string(d.Reason))
			announce()
		case d.Kind == events.KindAssigned && d.Job.Holder == h.cfg.ID && d.Job.Queue == h.queue:
			p.Offers++
			p.Refusals++
			claim := fmt.Appendf(nil, `{"v":1,"lease_id":%q,"generation":%d}`, d.Job.LeaseID, d.Job.Generation)
			switch typ {
			case AttackQueueDecline:
				fs = append(fs, h.publish(rec, h.subject(d.Job.ID, "release"), claim, h.msgID()))
			case AttackQueueRelease:
				fs = append(fs, h.publish(rec, h.subject(d.Job.ID, "ack"), claim, h.msgID()),
					h.publish(rec, h.subject(d.Job.ID, "release"), claim, h.msgID()))
			case AttackQueueExpire:
				fs = append(fs, h.publish(rec, h.subject(d.Job.ID, "ack"), claim, h.msgID()))
			case AttackQueueNoAck: // the offer is left to its ACK deadline
			}
		}
	}
	h.await(ctx, rec, fs)
}
