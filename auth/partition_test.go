package auth_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/auth"
	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/coordinator/coordtest"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/ops"
	"github.com/maknow/tenure/streams"
	"github.com/maknow/tenure/worker"
)

// partitions is the partition count of the partitioned tests.
const partitions = 4

// partEnv is a real embedded server running a configuration generated for
// a partitioned deployment, and a coordinator.Group connected as "coord".
type partEnv struct {
	b     *auth.Bundle
	url   string
	coord *client
	g     *coordinator.Group
}

// newPartEnv starts the server with the generated server.conf; serverMapping
// also makes the embedded server add the input mapping itself (as `tenure
// serve --partitions` does), on top of the one in the file.
func newPartEnv(t *testing.T, opts auth.Options, serverMapping bool) *partEnv {
	t.Helper()
	opts.Partitions = partitions
	b := generate(t, opts)
	so := []testutil.Option{testutil.ConfigFile(b.ServerConfigPath())}
	if serverMapping {
		so = append(so, testutil.Partitions(partitions))
	}
	srv := testutil.StartServer(t, so...)
	e := &partEnv{b: b, url: srv.ClientURL()}
	e.coord = connect(t, b, e.url, "coord", nats.MaxReconnects(-1))
	e.g = coordtest.StartGroup(t, coordinator.Config{ID: "coord", Conn: e.coord.nc, LeaderTTL: 600 * time.Millisecond,
		SnapshotEvery: 3, SnapshotInterval: 50 * time.Millisecond, HeadSigner: headSigner(t), HeadInterval: 20 * time.Millisecond,
		Genesis: coordinator.GenesisAdmin}, partitions)
	endGenesis(t, b, e.url, streams.Topology{})
	coordtest.WaitLive(t, e.g, 20*time.Second)
	return e
}

// jobIn returns a job name with the given prefix in partition k.
func jobIn(prefix string, k uint32) string {
	for i := 0; ; i++ {
		if j := fmt.Sprintf("%s-%d", prefix, i); events.PartitionOf(j, partitions) == k {
			return j
		}
	}
}

// The permissions of a partitioned deployment name every partition's
// streams, stay JetStream API subjects the server serves, and are what the
// server reads from server.conf, which also carries the input mapping.
// Unpartitioned, nothing changes.
func TestPartitionedPermissions(t *testing.T) {
	t.Parallel()
	all := append(slices.Clone(actors), auth.Actor{Name: "op", Role: auth.RoleOperator})
	for _, a := range all {
		p0, err := auth.PermissionsFor(a, "")
		if err != nil {
			t.Fatal(err)
		}
		if z, _ := auth.PartitionedPermissionsFor(a, "", 0); !equalPerms(z, p0) {
			t.Errorf("%s: 0 partitions differs from PermissionsFor", a.Name)
		}
		p, err := auth.PartitionedPermissionsFor(a, "ACME", partitions)
		if err != nil {
			t.Fatal(err)
		}
		api := "$JS.API."
		if a.Role == auth.RoleWorker {
			api = "JS.ACME.API." // in an account of its own
		}
		for _, s := range slices.Concat(p.PublishAllow, p.PublishDeny) {
			if rest, ok := strings.CutPrefix(s, api); ok && !slices.ContainsFunc(serverAPI(), func(pat string) bool { return subset("$JS.API."+rest, pat) }) {
				t.Errorf("%s: %s is no JetStream API subject of the server", a.Name, s)
			}
			// The unpartitioned decision stream, which does not exist: the
			// first look-up of discovery (a worker's, of its first consumer
			// name, which its account does not import).
			probe := api + "STREAM.INFO.ACME_OUT"
			if a.Role == auth.RoleWorker {
				probe = api + "CONSUMER.INFO.ACME_OUT." + events.WorkerConsumerName(a.Name, 0)
			}
			if strings.Contains(s, "TENURE") || strings.Contains(s, "ACME_OUT") && s != probe {
				t.Errorf("%s: %s names an unpartitioned stream or the default prefix", a.Name, s)
			}
		}
		for k := range partitions {
			out := fmt.Sprintf("ACME_P%d_OUT", k)
			if has := slices.Contains(p.PublishAllow, api+"STREAM.INFO."+out); has != (a.Role != auth.RoleWorker) {
				t.Errorf("%s: stream info on %s: %v", a.Name, out, has)
			}
		}
		switch a.Role {
		case auth.RoleWorker:
			// The look-up one past the last partition ends the count.
			past := fmt.Sprintf("%sCONSUMER.INFO.ACME_P%d_OUT.%s", api, partitions, events.WorkerConsumerName(a.Name, 0))
			if !slices.Contains(p.PublishAllow, past) {
				t.Errorf("%s: no %s in %v", a.Name, past, p.PublishAllow)
			}
			if slices.ContainsFunc(auth.WorkerImports(a.Name, "ACME", partitions), func(im auth.Import) bool { return im.To == past }) {
				t.Errorf("%s: %s is imported", a.Name, past)
			}
			for i := range events.WorkerConsumers {
				want := api + "CONSUMER.CREATE.ACME_P3_OUT." + events.WorkerConsumerName(a.Name, i) + ".tenure.out." + a.Name + ".>"
				if !slices.Contains(p.PublishAllow, want) {
					t.Errorf("%s: no %s in %v", a.Name, want, p.PublishAllow)
				}
			}
		case auth.RoleCoordinator:
			for _, s := range []string{"$JS.API.STREAM.CREATE.ACME_P3_IN", "$KV.ACME_P3_LEADER.>", "$O.ACME_P3_SNAPSHOTS.>", "$JS.API.STREAM.PURGE.OBJ_ACME_P3_SNAPSHOTS"} {
				if !slices.Contains(p.PublishAllow, s) {
					t.Errorf("coordinator: no %s", s)
				}
			}
			if !slices.Contains(p.PublishDeny, "$JS.API.STREAM.PURGE.ACME_P3_IN") {
				t.Errorf("coordinator: purge of ACME_P3_IN not denied: %v", p.PublishDeny)
			}
		}
	}
	if _, err := auth.PartitionedPermissionsFor(actors[0], "", events.MaxPartitions+1); err == nil {
		t.Error("too many partitions accepted")
	}
	if _, err := auth.Generate(auth.Options{Dir: t.TempDir(), Actors: actors, Partitions: events.MaxPartitions + 1}); err == nil {
		t.Error("Generate: too many partitions accepted")
	}

	plain := generate(t, auth.Options{})
	if conf, _ := os.ReadFile(plain.ServerConfigPath()); strings.Contains(string(conf), "mappings") {
		t.Error("unpartitioned server.conf has a mapping")
	}
	b := generate(t, auth.Options{Partitions: partitions})
	opts, err := server.ProcessConfigFile(b.ServerConfigPath())
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range opts.Users {
		want, _ := auth.PartitionedPermissionsFor(auth.Actor{Name: u.Username, Role: credRole(t, b, u.Username)}, "", partitions)
		if !slices.Equal(u.Permissions.Publish.Allow, want.PublishAllow) || !slices.Equal(u.Permissions.Publish.Deny, want.PublishDeny) ||
			!slices.Equal(u.Permissions.Subscribe.Allow, want.SubscribeAllow) {
			t.Errorf("%s: server read other permissions", u.Username)
		}
	}
	src, dst := events.InputMapping(partitions)
	if conf, _ := os.ReadFile(b.ServerConfigPath()); !strings.Contains(string(conf), fmt.Sprintf("%q: %q", src, dst)) {
		t.Errorf("no input mapping in server.conf:\n%s", conf)
	}
}

func credRole(t *testing.T, b *auth.Bundle, name string) auth.Role {
	c, ok := b.Credential(name)
	if !ok {
		t.Fatalf("no credential %s", name)
	}
	return c.Role
}

func equalPerms(a, b auth.Permissions) bool {
	return slices.Equal(a.PublishAllow, b.PublishAllow) && slices.Equal(a.PublishDeny, b.PublishDeny) &&
		slices.Equal(a.SubscribeAllow, b.SubscribeAllow) && slices.Equal(a.SubscribeDeny, b.SubscribeDeny) &&
		a.AllowResponses == b.AllowResponses
}

func serverAPI() []string {
	return []string{
		server.JSApiAccountInfo, server.JSApiStreamCreate, server.JSApiStreamUpdate, server.JSApiStreamInfo,
		server.JSApiStreamDelete, server.JSApiStreamPurge, server.JSApiMsgDelete, server.JSApiMsgGet,
		server.JSDirectMsgGet, server.JSDirectGetLastBySubject, server.JSApiConsumerCreate,
		server.JSApiConsumerCreateEx, server.JSApiDurableCreate, server.JSApiConsumerInfo,
		server.JSApiConsumerDelete, fmt.Sprintf(server.JSApiRequestNextT, "*", "*"),
		server.JSApiStreams, server.JSApiStreamList, // the administrator's
	}
}

// With 4 partitions the protocol works under the generated configuration,
// with no permissions violation on any connection: the server maps
// six-token inputs to their partition (from the file alone, and with the
// embedded server's own mapping added on top, as `tenure serve
// --partitions` does), a worker acquires, renews and completes leases in
// every partition through the SDK, and a dispatcher offers through ops.
func TestPartitionedEndToEnd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		serverMapping bool
		opts          auth.Options
	}{
		{"file mapping", false, auth.Options{}},
		{"file and server mapping", true, auth.Options{}},
		{"nkeys", true, auth.Options{NKeys: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			partitionedEndToEnd(t, newPartEnv(t, tc.opts, tc.serverMapping))
		})
	}
}

func partitionedEndToEnd(t *testing.T, e *partEnv) {
	ctx := context.Background()
	w1c := connect(t, e.b, e.url, "w1")

	// A partition-unaware publish is stored in its job's partition.
	for k := range uint32(partitions) {
		job := jobIn("map", k)
		ack, err := w1c.js.Publish(ctx, "tenure.in.worker.w1."+job+".acquire", []byte(`{"v":1,"lease_ms":60000}`))
		if err != nil {
			t.Fatalf("six-token publish of %s: %v", job, err)
		}
		if want := fmt.Sprintf("TENURE_P%d_IN", k); ack.Stream != want {
			t.Errorf("%s stored in %s, want %s", job, ack.Stream, want)
		}
	}

	w1, err := worker.Connect(w1c.nc, "w1", worker.WithErrorHandler(func(err error) { sdkError(t, "w1", err) }))
	if err != nil {
		t.Fatal(err)
	}
	defer w1.Close()
	for k := range uint32(partitions) {
		job := jobIn("e2e", k)
		l, err := w1.Acquire(ctx, job, worker.WithLeaseDuration(time.Minute))
		if err != nil {
			t.Fatalf("acquire %s (partition %d): %v", job, k, err)
		}
		first := l.Expires()
		time.Sleep(5 * time.Millisecond)
		if err := l.Renew(ctx); err != nil {
			t.Fatalf("renew %s: %v", job, err)
		}
		if !l.Expires().After(first) {
			t.Errorf("%s: renewal did not extend the lease", job)
		}
		if err := l.Complete(ctx, events.OutcomeSuccess, "done"); err != nil {
			t.Fatalf("complete %s: %v", job, err)
		}
	}

	// A dispatcher offers to w2 in partition 2; w2 accepts and releases.
	dc := connect(t, e.b, e.url, "disp")
	d, err := ops.New(dc.nc, "disp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	w2c := connect(t, e.b, e.url, "w2")
	w2, err := worker.Connect(w2c.nc, "w2", worker.WithErrorHandler(func(err error) { sdkError(t, "w2", err) }))
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	job := jobIn("offer", 2)
	if _, err := d.Offer(ctx, job, "w2", 60000, 0); err != nil {
		t.Fatalf("offer: %v", err)
	}
	var o worker.Offer
	select {
	case o = <-w2.Offers():
	case <-time.After(10 * time.Second):
		t.Fatal("w2: no offer")
	}
	l, err := o.Accept(ctx)
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	_ = w1.Close()
	_ = w2.Close()
	// noViolations flushes each connection: no wait for a late -ERR.
	for who, c := range map[string]*client{"coordinator": e.coord, "w1": w1c, "w2": w2c, "disp": dc} {
		c.noViolations(t, who)
	}
}

// In a partitioned deployment a worker still speaks only for itself, cannot
// write decisions, cannot read another worker's decisions from a partition's
// decision stream, and nobody but the coordinator administers the streams.
func TestPartitionedConfinement(t *testing.T) {
	t.Parallel()
	e := newPartEnv(t, auth.Options{}, true)
	ctx := context.Background()
	w1 := connect(t, e.b, e.url, "w1")
	w2 := connect(t, e.b, e.url, "w2")
	disp := connect(t, e.b, e.url, "disp")

	// Its own subjects, in the partition form, are accepted.
	job := jobIn("conf", 1)
	ack, err := w1.js.Publish(ctx, "tenure.in.worker.w1."+job+".acquire.1", []byte(`{"v":1,"lease_ms":60000}`))
	if err != nil || ack.Stream != "TENURE_P1_IN" {
		t.Fatalf("w1 publishing on its own partition subject: %v %+v", err, ack)
	}
	// w2 has decisions on TENURE_P1_OUT.
	job2 := jobIn("conf2", 1)
	if _, err := w2.js.Publish(ctx, "tenure.in.worker.w2."+job2+".acquire.1", []byte(`{"v":1,"lease_ms":60000}`)); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "w2's decision", func() bool {
		s, err := e.coord.js.Stream(ctx, "TENURE_P1_OUT")
		return err == nil && s.CachedInfo().State.Msgs >= 2
	})

	t.Run("publish as another worker", func(t *testing.T) {
		refused(t, w1, "w1", "tenure.in.worker.w2.job.acquire.1", "tenure.in.worker.w2."+job2+".release.1", "tenure.in.ops.w1.job.cancel.1", "tenure.in.coord.w1._.tick.0")
	})
	t.Run("publish decisions", func(t *testing.T) {
		refused(t, w1, "w1", "tenure.out.w1.x.granted.0", "tenure.out.w2.x.granted.3")
		refused(t, disp, "disp", "tenure.out.w1.x.granted.0")
		s, _ := e.coord.js.Stream(ctx, "TENURE_P0_OUT")
		if _, err := s.GetLastMsgForSubject(ctx, "tenure.out.w1.x.granted.0"); err == nil {
			t.Error("a refused decision was stored")
		}
	})
	t.Run("read another worker's decisions", func(t *testing.T) {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if _, err := w1.js.CreateConsumer(cctx, "TENURE_P1_OUT", jetstream.ConsumerConfig{
			FilterSubject: "tenure.out.w2.>", AckPolicy: jetstream.AckNonePolicy}); err == nil {
			t.Fatal("w1 created a consumer on w2's decisions")
		}
		w1.errs.expectViolation(t, "w1 consumer on tenure.out.w2.>", "JS.TENURE.API.CONSUMER.CREATE.TENURE_P1_OUT.")
		// An ordered consumer: refused the same way.
		octx, ocancel := context.WithTimeout(ctx, time.Second)
		defer ocancel()
		if c, err := w1.js.OrderedConsumer(octx, "TENURE_P1_OUT", jetstream.OrderedConsumerConfig{FilterSubjects: []string{"tenure.out.w2.>"}}); err == nil {
			if m, err := c.Next(jetstream.FetchMaxWait(time.Second)); err == nil {
				t.Fatalf("w1 read w2's decision %s", m.Subject())
			}
		}
		w1.errs.expectViolation(t, "w1 ordered consumer on tenure.out.w2.>", "JS.TENURE.API.CONSUMER.CREATE.TENURE_P1_OUT.")
		// Its own filter in the subject, w2's in the body: the server refuses.
		req, _ := json.Marshal(map[string]any{"stream_name": "TENURE_P1_OUT", "config": map[string]any{
			"name": "tw_w1_2", "filter_subject": "tenure.out.w2.>", "deliver_policy": "all", "ack_policy": "none",
		}})
		resp, err := w1.nc.Request("JS.TENURE.API.CONSUMER.CREATE.TENURE_P1_OUT.tw_w1_2.tenure.out.w1.>", req, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(resp.Data), `"error"`) {
			t.Fatalf("consumer with w2's filter created: %s", resp.Data)
		}
		// A core subscription to decisions is refused too (its own included).
		refusedSub(t, w1, "w1", "tenure.out.w2.>", "tenure.out.*.*.*.1", "tenure.out.w1.>")
	})
	t.Run("no stream info", func(t *testing.T) {
		// Which would list every decision subject of a partition (job
		// ids, worker names); the worker SDK finds the partitions by
		// looking up its consumer names instead (partitionedEndToEnd).
		for k := range uint32(partitions) {
			listsNoSubjects(t, w1, "w1", fmt.Sprintf("TENURE_P%d_OUT", k), "JS.TENURE.API.", "$JS.API.")
		}
		listsNoSubjects(t, w1, "w1", "TENURE_OUT", "JS.TENURE.API.")
	})
	t.Run("chain heads", func(t *testing.T) {
		// Each partition's on its own subject, naming its own stream; a
		// worker and a dispatcher receive them and cannot publish them.
		for i, c := range []*client{w1, disp} {
			who := []string{"w1", "disp"}[i]
			h := receivesHead(t, c, who, "tenure.heads.2", func() {
				if _, err := w1.js.Publish(ctx, "tenure.in.worker.w1."+jobIn("heads-"+who, 2)+".acquire", []byte(`{"v":1,"lease_ms":60000}`)); err != nil {
					t.Fatal(err)
				}
			})
			if h.Stream != "TENURE_P2_OUT" {
				t.Errorf("%s: head of %s, want TENURE_P2_OUT", who, h.Stream)
			}
			refused(t, c, who, "tenure.heads", "tenure.heads.2")
		}
		e.coord.noViolations(t, "coord")
	})
	t.Run("administer streams", func(t *testing.T) {
		adm := []string{"$JS.API.STREAM.DELETE.TENURE_P1_IN", "$JS.API.STREAM.PURGE.TENURE_P1_IN",
			"$JS.API.STREAM.MSG.DELETE.TENURE_P1_IN", "$JS.API.STREAM.UPDATE.TENURE_P1_IN",
			"$JS.API.STREAM.DELETE.TENURE_P2_OUT", "$JS.API.STREAM.PURGE.TENURE_P2_OUT"}
		refused(t, w1, "w1", adm...)
		refused(t, disp, "disp", adm...)
		// Nor the coordinator: the end of genesis is the administrator's.
		refused(t, e.coord, "coord", adm...)
		for _, a := range adm {
			refused(t, w1, "w1", strings.Replace(a, "$JS.API.", "JS.TENURE.API.", 1))
		}
		refused(t, w1, "w1", "$JS.API.CONSUMER.DELETE.TENURE_P1_OUT.x", "JS.TENURE.API.CONSUMER.DELETE.TENURE_P1_OUT.x")
		// A roll-up by publishing is refused by the input stream itself.
		m := nats.NewMsg("tenure.in.worker.w1." + job + ".renew.1")
		m.Header.Set(jetstream.MsgRollup, "all")
		m.Data = []byte(`{"v":1}`)
		if _, err := w1.js.PublishMsg(ctx, m); err == nil {
			t.Error("roll-up publish accepted")
		}
		in, err := e.coord.js.Stream(ctx, "TENURE_P1_IN")
		if err != nil || in.CachedInfo().State.Msgs < 2 {
			t.Fatalf("TENURE_P1_IN after the refused administration: %v", err)
		}
		if _, err := e.coord.js.Stream(ctx, "TENURE_P2_OUT"); err != nil {
			t.Fatalf("TENURE_P2_OUT after the refused administration: %v", err)
		}
	})
}

// The embedded server's own mapping (`tenure serve --partitions`) and the
// one in the generated file do not conflict: the same mapping twice starts
// and routes as one; a file generated for another count is overridden by the
// server's (the coordinators' count, which their streams record).
func TestPartitionedMappingTwice(t *testing.T) {
	t.Parallel()
	for _, fileCount := range []uint32{partitions, 8} {
		t.Run(fmt.Sprint("file ", fileCount), func(t *testing.T) {
			t.Parallel()
			b := generate(t, auth.Options{Partitions: fileCount})
			srv := testutil.StartServer(t, testutil.ConfigFile(b.ServerConfigPath()), testutil.Partitions(partitions))
			coord := connect(t, b, srv.ClientURL(), "coord")
			for k := range uint32(partitions) {
				p := events.Partition{Index: k, Count: partitions}
				if _, err := coord.js.CreateStream(context.Background(), jetstream.StreamConfig{
					Name: fmt.Sprintf("TENURE_P%d_IN", k), Subjects: []string{p.InputFilter()}, Storage: jetstream.MemoryStorage}); err != nil {
					t.Fatal(err)
				}
			}
			w1 := connect(t, b, srv.ClientURL(), "w1")
			for i := range 20 {
				job := fmt.Sprintf("twice-%d", i)
				ack, err := w1.js.Publish(context.Background(), "tenure.in.worker.w1."+job+".acquire", []byte(`{"v":1}`))
				if err != nil {
					t.Fatalf("%s: %v", job, err)
				}
				if want := fmt.Sprintf("TENURE_P%d_IN", events.PartitionOf(job, partitions)); ack.Stream != want {
					t.Errorf("%s in %s, want %s", job, ack.Stream, want)
				}
			}
		})
	}
}
