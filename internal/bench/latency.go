package bench

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/streams"
)

// rtt is scenario 2: one-at-a-time round trips.
func (b *runner) rtt(ctx context.Context) error {
	base, err := b.baselineRTT(ctx)
	if err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	ten, err := b.tenureRTT(ctx)
	if err != nil {
		return fmt.Errorf("tenure: %w", err)
	}
	r := b.res
	r.BaselineRTTP50, r.BaselineRTTP99, r.BaselineRTTP999 = us(percentile(base, 50)), us(percentile(base, 99)), us(percentile(base, 99.9))
	r.TenureRTTP50, r.TenureRTTP99, r.TenureRTTP999 = us(percentile(ten, 50)), us(percentile(ten, 99)), us(percentile(ten, 99.9))
	r.RTTP50Ratio, r.RTTP99Ratio = ratio(r.TenureRTTP50, r.BaselineRTTP50), ratio(r.TenureRTTP99, r.BaselineRTTP99)
	b.logf("  baseline round trip: p50 %.0f µs, p99 %.0f µs, p99.9 %.0f µs", r.BaselineRTTP50, r.BaselineRTTP99, r.BaselineRTTP999)
	b.logf("  tenure renewal:      p50 %.0f µs, p99 %.0f µs, p99.9 %.0f µs (x%.2f, x%.2f)", r.TenureRTTP50, r.TenureRTTP99, r.TenureRTTP999, r.RTTP50Ratio, r.RTTP99Ratio)
	return nil
}

func (b *runner) samples() (warm, n int) { return max(b.cfg.RTTSamples/10, 10), b.cfg.RTTSamples }

// baselineRTT: publish an input (waiting for its PubAck), then wait until
// the consumer's answer to it is stored and seen by the publisher's own
// ordered consumer on the answer stream.
func (b *runner) baselineRTT(ctx context.Context) ([]time.Duration, error) {
	srv, err := b.startServer(b.newDir("baseline-rtt"), false)
	if err != nil {
		return nil, err
	}
	defer srv.Shutdown()
	ncP, err := connect(srv.ClientURL(), "bench-baseline-client")
	if err != nil {
		return nil, err
	}
	defer ncP.Close()
	ncC, err := connect(srv.ClientURL(), "bench-baseline-consumer")
	if err != nil {
		return nil, err
	}
	defer ncC.Close()
	jsP, err := jetstream.New(ncP)
	if err != nil {
		return nil, err
	}
	jsC, err := jetstream.New(ncC, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return nil, err
	}
	if _, err := jsP.CreateStream(ctx, baselineStream("BASE_IN", "base.in.>")); err != nil {
		return nil, err
	}
	if _, err := jsP.CreateStream(ctx, baselineStream("BASE_OUT", "base.out.>")); err != nil {
		return nil, err
	}
	// The answering consumer, as in the pipeline; the answer names the
	// input's sequence in a header.
	in, err := jsC.OrderedConsumer(ctx, "BASE_IN", jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	out := payload(200, "answer")
	cc, err := in.Consume(func(m jetstream.Msg) {
		meta, err := m.Metadata()
		if err != nil {
			return
		}
		msg := &nats.Msg{Subject: "base.out.client.job.renewed", Data: out, Header: nats.Header{}}
		msg.Header.Set("Cause", strconv.FormatUint(meta.Sequence.Stream, 10))
		_, _ = jsC.PublishMsgAsync(msg)
	}, jetstream.PullMaxMessages(1024))
	if err != nil {
		return nil, err
	}
	defer cc.Stop()
	// The client's view of the answers.
	seen := make(chan uint64, 16)
	answers, err := followFromNow(ctx, jsP, "BASE_OUT", "base.out.client.>")
	if err != nil {
		return nil, err
	}
	ac, err := answers.Consume(func(m jetstream.Msg) {
		c, _ := strconv.ParseUint(m.Headers().Get("Cause"), 10, 64)
		seen <- c
	})
	if err != nil {
		return nil, err
	}
	defer ac.Stop()

	stop := b.profile("rtt-baseline")
	defer stop()
	input := payload(100, "input")
	warm, n := b.samples()
	var d []time.Duration
	for i := range warm + n {
		t0 := time.Now()
		ack, err := jsP.Publish(ctx, "base.in.worker.client.job.renew", input)
		if err != nil {
			return nil, err
		}
		for {
			var c uint64
			select {
			case c = <-seen:
			case <-time.After(10 * time.Second):
				return nil, fmt.Errorf("no answer to input %d: %w", ack.Sequence, errTimeout)
			}
			if c == ack.Sequence {
				break
			}
		}
		if i >= warm {
			d = append(d, time.Since(t0))
		}
	}
	return d, nil
}

// tenureRTT: one SDK worker holding one lease renews it, one renewal at a
// time: publish, PubAck, fold, decision stored, decision seen by the
// worker's consumer, verdict returned.
func (b *runner) tenureRTT(ctx context.Context) ([]time.Duration, error) {
	srv, err := b.startServer(b.newDir("tenure-rtt"), false)
	if err != nil {
		return nil, err
	}
	defer srv.Shutdown()
	co, err := b.startCoordinator(srv, nil)
	if err != nil {
		return nil, err
	}
	defer co.stop()
	if err := co.waitLive(30 * time.Second); err != nil {
		return nil, err
	}
	leases, closeAll, err := acquireMany(ctx, srv.ClientURL(), 1, 1)
	defer closeAll()
	if err != nil {
		return nil, err
	}
	l := leases[0]
	stop := b.profile("rtt-tenure")
	defer stop()
	warm, n := b.samples()
	var d []time.Duration
	for i := range warm + n {
		t0 := time.Now()
		if err := l.Renew(ctx); err != nil {
			return nil, err
		}
		if i >= warm {
			d = append(d, time.Since(t0))
		}
	}
	return d, nil
}

// expiry measures, on an idle system, the time from each lease's expires_at
// to its expired decision being stored (the decision's stored timestamp):
// ExpirySamples leases are acquired with durations 20 ms apart, so that
// every expiry is driven by a tick of its own.
func (b *runner) expiry(ctx context.Context) error {
	srv, err := b.startServer(b.newDir("tenure-expiry"), false)
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	co, err := b.startCoordinator(srv, nil)
	if err != nil {
		return err
	}
	defer co.stop()
	if err := co.waitLive(30 * time.Second); err != nil {
		return err
	}
	nc, err := connect(srv.ClientURL(), "bench-expiry")
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	n := b.cfg.ExpirySamples
	const first, gap = 300, 20 // ms
	for i := range n {
		subj := events.InputSubject(events.RoleWorker, "wexp", "exp-"+itoa(i), events.VerbAcquire)
		body := fmt.Appendf(nil, `{"v":1,"lease_ms":%d}`, first+gap*i)
		if _, err := js.Publish(ctx, subj, body); err != nil {
			return err
		}
	}
	out, err := js.Stream(ctx, streams.Topology{}.DecisionStream())
	if err != nil {
		return err
	}
	cons, err := out.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"tenure.out.*.*.expired"}})
	if err != nil {
		return err
	}
	it, err := cons.Messages()
	if err != nil {
		return err
	}
	defer it.Stop()
	var lat []time.Duration
	deadline := time.AfterFunc(time.Duration(first+gap*n)*time.Millisecond+30*time.Second, it.Stop)
	defer deadline.Stop()
	for len(lat) < n {
		m, err := it.Next()
		if err != nil {
			return fmt.Errorf("%d of %d expiries seen: %w", len(lat), n, err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return err
		}
		d, err := events.DecodeDecision(m.Data())
		if err != nil {
			return err
		}
		lat = append(lat, meta.Timestamp.Sub(time.Unix(0, d.Job.ExpiresAt)))
	}
	r := b.res
	r.ExpiryP50, r.ExpiryP99, r.ExpiryMax = ms(percentile(lat, 50)), ms(percentile(lat, 99)), ms(percentile(lat, 100))
	b.logf("  expiry latency (%d leases, idle): p50 %.1f ms, p99 %.1f ms, max %.1f ms", n, r.ExpiryP50, r.ExpiryP99, r.ExpiryMax)
	return nil
}
