package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/embedded"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/streams"
)

// coordinatorID is the id of the scenarios' coordinator (every restart
// runs one under the same id, as a restarted `tenure serve` does).
const coordinatorID = "c1"

// leaderTTL is its leadership entry's lifetime: short, so that a
// restarted coordinator goes live quickly.
const leaderTTL = 600 * time.Millisecond

// deployment is one scenario's Tenure: an embedded nats-server, the
// topology, a coordinator the scenario may stop and start, and the
// runner's own readers of both streams.
type deployment struct {
	t     testing.TB
	srv   *embedded.Server
	topo  streams.Topology
	nc    *nats.Conn
	js    jetstream.JetStream
	coord *runningCoordinator

	decisions *feed // every decision stored, in stream order
	inputs    *feed // every input stored, in stream order
}

type runningCoordinator struct {
	c      *coordinator.Coordinator
	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan error
}

// startDeployment starts everything; t.Cleanup stops it.
func startDeployment(t testing.TB, prefix string) (*deployment, error) {
	d := &deployment{t: t, topo: streams.Topology{Prefix: prefix}, decisions: newFeed(), inputs: newFeed()}
	d.srv = testutil.StartServer(t)
	d.nc, d.js = testutil.Connect(t, d.srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := streams.Ensure(ctx, d.js, d.topo, leaderTTL); err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	if err := d.read(ctx, d.topo.DecisionStream(), d.decisions, decisionEntry); err != nil {
		return nil, err
	}
	if err := d.read(ctx, d.topo.InputStream(), d.inputs, inputEntry); err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		if err := d.stopCoordinator(); err != nil {
			t.Error(err)
		}
	})
	if err := d.startCoordinator(); err != nil {
		return nil, err
	}
	return d, nil
}

// read follows stream from its first message with an ordered consumer
// (the runner's own, on a deployment nobody hostile takes part in).
func (d *deployment) read(ctx context.Context, stream string, f *feed, conv func(jetstream.Msg) (entry, error)) error {
	c, err := d.js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return fmt.Errorf("read %s: %w", stream, err)
	}
	cc, err := c.Consume(func(m jetstream.Msg) {
		e, err := conv(m)
		if err != nil {
			d.t.Errorf("read %s: %v", stream, err)
			return
		}
		f.add(e)
	})
	if err != nil {
		return fmt.Errorf("read %s: %w", stream, err)
	}
	d.t.Cleanup(cc.Stop)
	return nil
}

func decisionEntry(m jetstream.Msg) (entry, error) {
	md, err := m.Metadata()
	if err != nil {
		return entry{}, err
	}
	var v map[string]any
	if err := json.Unmarshal(m.Data(), &v); err != nil {
		return entry{}, fmt.Errorf("decision %d: %w", md.Sequence.Stream, err)
	}
	return entry{seq: md.Sequence.Stream, subject: m.Subject(), v: v}, nil
}

// inputEntry is an input as the object {"seq","subject","msg_id","body"},
// its body decoded (or its text, when it is not JSON).
func inputEntry(m jetstream.Msg) (entry, error) {
	md, err := m.Metadata()
	if err != nil {
		return entry{}, err
	}
	var body any
	if json.Unmarshal(m.Data(), &body) != nil {
		body = string(m.Data())
	}
	v := map[string]any{
		"seq": float64(md.Sequence.Stream), "subject": m.Subject(),
		"msg_id": m.Headers().Get(nats.MsgIdHdr), "body": body,
	}
	return entry{seq: md.Sequence.Stream, subject: m.Subject(), v: v}, nil
}

// startCoordinator runs a coordinator and waits until it is live.
func (d *deployment) startCoordinator() error {
	if d.coord != nil {
		return errors.New("the coordinator runs already")
	}
	nc, err := nats.Connect(d.srv.ClientURL(), nats.MaxReconnects(-1), nats.Name("coordinator "+coordinatorID))
	if err != nil {
		return err
	}
	c, err := coordinator.New(coordinator.Config{ID: coordinatorID, Conn: nc, Topology: d.topo, LeaderTTL: leaderTTL})
	if err != nil {
		nc.Close()
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningCoordinator{c: c, nc: nc, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- c.Run(ctx) }()
	d.coord = r
	return testutil.Poll(30*time.Second, func() error {
		select {
		case err := <-r.done:
			r.done <- err
			return fmt.Errorf("the coordinator stopped: %v", err)
		default:
		}
		if st := c.Stats(); !st.Live {
			return fmt.Errorf("coordinator %s not live: %s %s", coordinatorID, st.State, st.Reason)
		}
		return nil
	})
}

// stopCoordinator stops the coordinator, if one runs.
func (d *deployment) stopCoordinator() error {
	r := d.coord
	if r == nil {
		return nil
	}
	d.coord = nil
	r.cancel()
	defer r.nc.Close()
	select {
	case err := <-r.done:
		if err != nil {
			return fmt.Errorf("coordinator %s: %w", coordinatorID, err)
		}
		return nil
	case <-time.After(15 * time.Second):
		return fmt.Errorf("coordinator %s did not stop within 15 s", coordinatorID)
	}
}

// caughtUp waits until the coordinator has folded every stored input,
// stored every decision it derived, and the runner has read them all.
func (d *deployment) caughtUp(timeout time.Duration) error {
	if d.coord == nil {
		return errors.New("caught_up: the coordinator is stopped")
	}
	ctx := context.Background()
	return testutil.Poll(timeout, func() error {
		in, err := d.js.Stream(ctx, d.topo.InputStream())
		if err != nil {
			return err
		}
		out, err := d.js.Stream(ctx, d.topo.DecisionStream())
		if err != nil {
			return err
		}
		st := d.coord.c.Stats()
		lastIn, lastOut := in.CachedInfo().State.LastSeq, out.CachedInfo().State.LastSeq
		if st.InputsFolded != lastIn || st.DecisionsStored != lastOut || uint64(d.decisions.len()) != lastOut || uint64(d.inputs.len()) != lastIn {
			return fmt.Errorf("inputs %d folded of %d (%d read), decisions %d stored of %d (%d read)",
				st.InputsFolded, lastIn, d.inputs.len(), st.DecisionsStored, lastOut, d.decisions.len())
		}
		return nil
	})
}

// publish stores an input as a JetStream publish (with Nats-Msg-Id msgID
// when it is not empty) and returns its PubAck.
func (d *deployment) publish(subject string, body []byte, msgID string, timeout time.Duration) (*jetstream.PubAck, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	m := &nats.Msg{Subject: subject, Data: body, Header: nats.Header{}}
	if msgID != "" {
		m.Header.Set(nats.MsgIdHdr, msgID)
	}
	return d.js.PublishMsg(ctx, m)
}

// isVerdictOf reports whether decision e answers input seq: its cause,
// and a kind that is not derived (PROTOCOL.md §15).
func isVerdictOf(e entry, seq uint64) bool {
	cause, _ := e.v["cause"].(float64)
	kind, _ := e.v["kind"].(string)
	k, ok := events.ParseKind(kind)
	return uint64(cause) == seq && ok && !k.Derived()
}
