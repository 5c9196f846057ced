package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/auth"
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
	// With Scenario.Auth: the credentials of tenure auth init's
	// configuration, and a connection of each actor the runner publishes
	// as, by "<role>.<actor>" (the runner reads as the coordinator's user).
	bundle *auth.Bundle
	pubs   map[string]jetstream.JetStream

	decisions *feed // every decision stored, in stream order
	inputs    *feed // every input stored, in stream order
}

type runningCoordinator struct {
	c      *coordinator.Coordinator
	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan error
}

// startDeployment starts everything; t.Cleanup stops it. With
// withAuth, the server runs the configuration tenure auth init writes for
// a coordinator (coordinatorID), a dispatcher (disp) and the workers
// worker and w2, and every connection uses its actor's credential.
func startDeployment(t testing.TB, prefix, worker string, withAuth bool) (*deployment, error) {
	d := &deployment{t: t, topo: streams.Topology{Prefix: prefix}, decisions: newFeed(), inputs: newFeed()}
	if withAuth {
		if err := d.generate(t, prefix, worker); err != nil {
			return nil, err
		}
	} else {
		d.srv = testutil.StartServer(t)
		d.nc, d.js = testutil.Connect(t, d.srv.ClientURL())
	}
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

// adminID is the administrator of a deployment under auth init: its
// tenure genesis ends a brand-new deployment's genesis.
const adminID = "admin"

// generate writes tenure auth init's configuration and credentials, starts
// the server with it and connects the runner as the coordinator's user and
// each ops and worker actor but the adapter's worker.
func (d *deployment) generate(t testing.TB, prefix, worker string) error {
	actors := []auth.Actor{{Name: coordinatorID, Role: auth.RoleCoordinator}, {Name: "disp", Role: auth.RoleDispatcher},
		{Name: worker, Role: auth.RoleWorker}, {Name: adminID, Role: auth.RoleAdmin}}
	if worker != "w2" {
		actors = append(actors, auth.Actor{Name: "w2", Role: auth.RoleWorker})
	}
	b, err := auth.Generate(auth.Options{Dir: t.TempDir(), Actors: actors, StreamPrefix: prefix, BcryptCost: 4})
	if err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	if err := b.Write(false); err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	d.bundle = b
	d.srv = testutil.StartServer(t, testutil.ConfigFile(b.ServerConfigPath()))
	connectAs := func(name string) (*nats.Conn, jetstream.JetStream, error) {
		c, _ := b.Credential(name)
		nc, err := c.Connect(d.srv.ClientURL(), nats.MaxReconnects(-1))
		if err != nil {
			return nil, nil, fmt.Errorf("connect as %s: %w", name, err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if c.JetStreamAPIPrefix != "" {
			js, err = jetstream.NewWithAPIPrefix(nc, c.JetStreamAPIPrefix)
		}
		return nc, js, err
	}
	if d.nc, d.js, err = connectAs(coordinatorID); err != nil {
		return err
	}
	d.pubs = map[string]jetstream.JetStream{"coord." + coordinatorID: d.js}
	for _, a := range actors[1:] {
		if a.Name == worker || a.Role == auth.RoleAdmin {
			continue // the adapter's; the administrator's (startCoordinator)
		}
		_, js, err := connectAs(a.Name)
		if err != nil {
			return err
		}
		role := "ops"
		if a.Role == auth.RoleWorker {
			role = "worker"
		}
		d.pubs[role+"."+a.Name] = js
	}
	return nil
}

// adapterEnv is the environment that tells the adapter how to connect as
// worker: with its credential, under tenure auth init's configuration.
func (d *deployment) adapterEnv(worker string) []string {
	env := []string{"TENURE_NATS_URL=" + d.srv.ClientURL()}
	if d.bundle != nil {
		c, _ := d.bundle.Credential(worker)
		env = append(env, "TENURE_NATS_USER="+c.User, "TENURE_NATS_PASSWORD="+c.Password, "TENURE_NATS_INBOX_PREFIX="+c.InboxPrefix)
	}
	return env
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
func (d *deployment) startCoordinator() (err error) {
	if d.coord != nil {
		return errors.New("the coordinator runs already")
	}
	nc, err := nats.Connect(d.srv.ClientURL(), nats.MaxReconnects(-1), nats.Name("coordinator "+coordinatorID))
	if d.bundle != nil {
		c, _ := d.bundle.Credential(coordinatorID)
		nc, err = c.Connect(d.srv.ClientURL(), nats.MaxReconnects(-1))
	}
	if err != nil {
		return err
	}
	cfg := coordinator.Config{ID: coordinatorID, Conn: nc, Topology: d.topo, LeaderTTL: leaderTTL}
	if d.bundle != nil {
		cfg.Genesis = coordinator.GenesisAdmin // tenure auth init's coordinator may not update its streams
	}
	c, err := coordinator.New(cfg)
	if err != nil {
		nc.Close()
		return err
	}
	if d.bundle != nil {
		// The administrator's tenure genesis, on a brand-new deployment
		// (on one past genesis it does nothing).
		a, _ := d.bundle.Credential(adminID)
		anc, err := a.Connect(d.srv.ClientURL())
		if err != nil {
			nc.Close()
			return fmt.Errorf("connect as %s: %w", adminID, err)
		}
		genesis := make(chan error, 1)
		go func() {
			defer anc.Close()
			js, err := jetstream.New(anc)
			if err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				_, err = coordinator.EndGenesis(ctx, js, d.topo, nil, 10*time.Millisecond)
			}
			genesis <- err
		}()
		defer func() {
			if gerr := <-genesis; gerr != nil && err == nil {
				err = fmt.Errorf("the administrator's end of genesis: %w", gerr)
			}
		}()
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

// stored returns how many inputs and decisions the streams hold now, once
// the deployment's readers have read them (a mark taken from what the
// readers had read alone could come before a decision already stored: on
// a loaded machine, consumer-deleted's "renewed" mark came before the
// explicit renewal's verdict, which then answered the wait for the next
// automatic one).
func (d *deployment) stored(timeout time.Duration) (inputs, decisions int, err error) {
	ctx := context.Background()
	in, err := d.js.Stream(ctx, d.topo.InputStream())
	if err != nil {
		return 0, 0, err
	}
	out, err := d.js.Stream(ctx, d.topo.DecisionStream())
	if err != nil {
		return 0, 0, err
	}
	lastIn, lastOut := int(in.CachedInfo().State.LastSeq), int(out.CachedInfo().State.LastSeq)
	err = testutil.Poll(timeout, func() error {
		if d.inputs.len() < lastIn || d.decisions.len() < lastOut {
			return fmt.Errorf("read %d of %d inputs and %d of %d decisions", d.inputs.len(), lastIn, d.decisions.len(), lastOut)
		}
		return nil
	})
	return lastIn, lastOut, err
}

// workerConsumers names the consumers of the decision stream that read
// worker's decisions (their one filter is tenure.out.<worker>.>), sorted.
func (d *deployment) workerConsumers(ctx context.Context, worker string) ([]string, error) {
	if d.bundle != nil {
		// The coordinator's user may not list consumers; a worker may
		// hold only its own four names.
		var names []string
		for _, n := range events.WorkerConsumerNames(worker) {
			_, err := d.js.Consumer(ctx, d.topo.DecisionStream(), n)
			if errors.Is(err, jetstream.ErrConsumerNotFound) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("consumer %s: %w", n, err)
			}
			names = append(names, n)
		}
		return names, nil
	}
	s, err := d.js.Stream(ctx, d.topo.DecisionStream())
	if err != nil {
		return nil, err
	}
	filter := events.AddresseeFilter(worker)
	var names []string
	l := s.ListConsumers(ctx)
	for ci := range l.Info() {
		c := ci.Config
		if c.FilterSubject == filter || len(c.FilterSubjects) == 1 && c.FilterSubjects[0] == filter {
			names = append(names, ci.Name)
		}
	}
	if err := l.Err(); err != nil {
		return nil, fmt.Errorf("list consumers: %w", err)
	}
	slices.Sort(names)
	return names, nil
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
	js := d.js
	if d.pubs != nil {
		// tenure.in.<role>.<actor>...: as that actor, with its credential.
		tok := strings.SplitN(subject, ".", 5)
		if len(tok) < 5 || d.pubs[tok[2]+"."+tok[3]] == nil {
			return nil, fmt.Errorf("no credential to publish %s with (the runner has those of %s and disp, w2)", subject, coordinatorID)
		}
		js = d.pubs[tok[2]+"."+tok[3]]
	}
	return js.PublishMsg(ctx, m)
}

// isVerdictOf reports whether decision e answers input seq: its cause,
// and a kind that is not derived (PROTOCOL.md §15).
func isVerdictOf(e entry, seq uint64) bool {
	cause, _ := e.v["cause"].(float64)
	kind, _ := e.v["kind"].(string)
	k, ok := events.ParseKind(kind)
	return uint64(cause) == seq && ok && !k.Derived()
}
