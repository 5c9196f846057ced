package auth_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/maknow/tenure/auth"
	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/embedded"
	"github.com/maknow/tenure/heads"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/streams"
)

// actors is the cast of the permission tests.
var actors = []auth.Actor{
	{Name: "coord", Role: auth.RoleCoordinator},
	{Name: "disp", Role: auth.RoleDispatcher},
	{Name: "w1", Role: auth.RoleWorker},
	{Name: "w2", Role: auth.RoleWorker},
	{Name: "admin", Role: auth.RoleAdmin},
}

// generate writes a bundle for actors into a fresh directory. Tests use the
// cheapest bcrypt cost: the server checks the hash on every connection.
func generate(t testing.TB, opts auth.Options) *auth.Bundle {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	if opts.Actors == nil {
		opts.Actors = actors
	}
	if !slices.ContainsFunc(opts.Actors, func(a auth.Actor) bool { return a.Role == auth.RoleAdmin }) {
		// The administrator, as tenure auth init writes it: the genesis of
		// every new deployment is its (endGenesis).
		opts.Actors = append(slices.Clone(opts.Actors), auth.Actor{Name: "admin", Role: auth.RoleAdmin})
	}
	if opts.BcryptCost == 0 {
		opts.BcryptCost = 4
	}
	b, err := auth.Generate(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Write(false); err != nil {
		t.Fatal(err)
	}
	return b
}

// errLog collects the asynchronous errors of a connection: permissions
// violations arrive that way.
type errLog struct {
	mu   sync.Mutex
	errs []error
	c    chan error
}

func newErrLog() *errLog { return &errLog{c: make(chan error, 64)} }

func (l *errLog) handler() nats.Option {
	return nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		l.mu.Lock()
		l.errs = append(l.errs, err)
		l.mu.Unlock()
		select {
		case l.c <- err:
		default:
		}
	})
}

func (l *errLog) all() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

// reset forgets the errors received so far.
func (l *errLog) reset() {
	l.mu.Lock()
	l.errs = nil
	l.mu.Unlock()
	for {
		select {
		case <-l.c:
		default:
			return
		}
	}
}

// expectViolation waits for a permissions violation that names subject.
func (l *errLog) expectViolation(t testing.TB, what, subject string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case err := <-l.c:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), subject) {
				return
			}
		case <-deadline:
			t.Fatalf("%s: no permissions violation for %q", what, subject)
		}
	}
}

// violationMarker is a subject no actor of tenure auth init may publish
// on: a publish on it is a permissions violation every time.
const violationMarker = "_tenure_test.violation_marker"

// noViolations fails t if c's connection had a permissions violation since
// its errors were last reset. The server reports a violation on the
// connection in the order of what the client sent, and the client tells
// the ErrorHandler in that order: so c publishes on violationMarker, and
// once the ErrorHandler has heard of that violation it has heard of every
// one before it. No wait for a late one is needed. (A closed connection is
// only checked as its ErrorHandler was told.)
func (c *client) noViolations(t testing.TB, who string) {
	t.Helper()
	if !c.nc.IsClosed() {
		if err := c.nc.Publish(violationMarker, nil); err != nil {
			t.Fatalf("%s: publish the marker: %v", who, err)
		}
		if err := c.nc.Flush(); err != nil {
			t.Fatalf("%s: flush: %v", who, err)
		}
		c.errs.expectViolation(t, who+" publishing the marker", `Publish to "`+violationMarker+`"`)
	}
	for _, err := range c.errs.all() {
		if errors.Is(err, nats.ErrPermissionViolation) && !strings.Contains(err.Error(), violationMarker) {
			t.Errorf("%s: %v", who, err)
		}
	}
}

// client is one actor's connection.
type client struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	errs *errLog
}

// connect connects as actor name with its generated credential.
func connect(t testing.TB, b *auth.Bundle, url, name string, extra ...nats.Option) *client {
	t.Helper()
	c, ok := b.Credential(name)
	if !ok {
		t.Fatalf("no credential for %s", name)
	}
	l := newErrLog()
	nc, err := c.Connect(url, append([]nats.Option{l.handler(), nats.Timeout(20 * time.Second)}, extra...)...)
	if err != nil {
		t.Fatalf("connect as %s: %v", name, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if c.JetStreamAPIPrefix != "" {
		js, err = jetstream.NewWithAPIPrefix(nc, c.JetStreamAPIPrefix) // a worker: in an account of its own
	}
	if err != nil {
		t.Fatal(err)
	}
	return &client{nc: nc, js: js, errs: l}
}

// env is a real embedded server running the generated configuration and a
// real coordinator connected as the coordinator user "coord".
type env struct {
	b     *auth.Bundle
	srv   *embedded.Server
	url   string
	coord *client // the coordinator's own connection
	c     *coordinator.Coordinator
	run   *coordRun // the current coordinator's Run
	stop  func()
}

// coordRun is one run of a coordinator's Run.
type coordRun struct {
	done chan struct{} // closed when Run has returned
	err  error         // what it returned, once done is closed
}

// exited reports whether Run has returned, and what it returned.
func (r *coordRun) exited() (bool, error) {
	select {
	case <-r.done:
		return true, r.err
	default:
		return false, nil
	}
}

func newEnv(t *testing.T, opts auth.Options) *env {
	t.Helper()
	b := generate(t, opts)
	srv := testutil.StartServer(t, testutil.ConfigFile(b.ServerConfigPath()))
	e := &env{b: b, srv: srv, url: srv.ClientURL()}
	e.startCoordinator(t, coordinator.Config{SnapshotEvery: 3, SnapshotInterval: 50 * time.Millisecond,
		HeadSigner: headSigner(t), HeadInterval: 20 * time.Millisecond})
	return e
}

// headSigner is a new key for the coordinator's chain heads.
func headSigner(t testing.TB) nkeys.KeyPair {
	t.Helper()
	kp, err := nkeys.CreateServer()
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// receivesHead subscribes c to subject, runs trigger (which makes the
// coordinator store decisions), and waits for a signed chain head there:
// the subscription is allowed and the head reaches the account.
func receivesHead(t *testing.T, c *client, who, subject string, trigger func()) heads.Head {
	t.Helper()
	c.errs.reset()
	sub, err := c.nc.SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	trigger()
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("%s: no chain head on %s: %v", who, subject, err)
	}
	h, err := heads.Parse(m.Data)
	if err == nil {
		err = heads.Verify(h)
	}
	if err != nil {
		t.Fatalf("%s: head on %s: %v", who, subject, err)
	}
	c.noViolations(t, who)
	return h
}

func (e *env) startCoordinator(t *testing.T, cfg coordinator.Config) {
	t.Helper()
	e.launchCoordinator(t, cfg)
	endGenesis(t, e.b, e.url, cfg.Topology)
	testutil.WaitFor(t, 20*time.Second, "coordinator live", func() bool { return e.c.Stats().Live })
}

// endGenesis is the administrator's `tenure genesis` on a deployment whose
// coordinator runs (or starts): it waits for the coordinator's rules and
// policy and widens the input stream of every partition of top's
// deployment (count partitions, 0: top itself); on a deployment past
// genesis it does nothing.
func endGenesis(t testing.TB, b *auth.Bundle, url string, top streams.Topology) {
	t.Helper()
	admin := connect(t, b, url, "admin")
	defer admin.nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, pt := range top.Partitions(b.Partitions) {
		if _, err := coordinator.EndGenesisQuotas(ctx, admin.js, pt, b.Quotas, nil, 10*time.Millisecond); err != nil {
			t.Fatalf("the administrator's end of genesis of %s: %v", pt.InputStream(), err)
		}
	}
	admin.noViolations(t, "admin")
}

// launchCoordinator starts a coordinator, as startCoordinator, without
// waiting for it to go live.
func (e *env) launchCoordinator(t *testing.T, cfg coordinator.Config) {
	t.Helper()
	e.coord = connect(t, e.b, e.url, "coord", nats.MaxReconnects(-1))
	cfg.ID, cfg.Conn = "coord", e.coord.nc
	cfg.Genesis = coordinator.GenesisAdmin // tenure auth init's coordinator may not update streams
	if cfg.LeaderTTL == 0 {
		cfg.LeaderTTL = 600 * time.Millisecond
	}
	c, err := coordinator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	conn := e.coord.nc
	run := &coordRun{done: make(chan struct{})}
	go func() { run.err = c.Run(ctx); close(run.done) }()
	e.c, e.run = c, run
	var once sync.Once
	e.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-run.done:
				if run.err != nil {
					t.Errorf("coordinator: %v", run.err)
				}
			case <-time.After(15 * time.Second):
				t.Errorf("coordinator did not stop")
			}
			conn.Close()
		})
	}
	t.Cleanup(e.stop)
}

// caughtUp waits until the coordinator has folded every stored input and
// stored every decision, reading the streams as the coordinator user.
func (e *env) caughtUp(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	testutil.WaitFor(t, 20*time.Second, "coordinator to catch up", func() bool {
		in, err1 := e.coord.js.Stream(ctx, "TENURE_IN")
		out, err2 := e.coord.js.Stream(ctx, "TENURE_OUT")
		if err1 != nil || err2 != nil {
			return false
		}
		st := e.c.Stats()
		return st.InputsFolded == in.CachedInfo().State.LastSeq && st.DecisionsStored == out.CachedInfo().State.LastSeq
	})
}

// stored is one stored message.
type stored struct {
	seq     uint64
	subject string
	data    []byte
}

// read returns every message of stream name, read as the coordinator user.
func (e *env) read(t testing.TB, name string) []stored {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := e.coord.js.Stream(ctx, name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	st := s.CachedInfo().State
	var out []stored
	for seq := st.FirstSeq; st.Msgs > 0 && seq <= st.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("%s #%d: %v", name, seq, err)
		}
		out = append(out, stored{m.Sequence, m.Subject, m.Data})
	}
	return out
}
