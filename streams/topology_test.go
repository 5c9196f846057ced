package streams_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/streams"
)

const leaderTTL = 5 * time.Second

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func startJS(t *testing.T) jetstream.JetStream {
	t.Helper()
	srv := testutil.StartServer(t)
	_, js := testutil.Connect(t, srv.ClientURL())
	return js
}

func streamNames(t *testing.T, ctx context.Context, js jetstream.JetStream) []string {
	t.Helper()
	l := js.StreamNames(ctx)
	var names []string
	for n := range l.Name() {
		names = append(names, n)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("list streams: %v", err)
	}
	slices.Sort(names)
	return names
}

func TestTopologyNames(t *testing.T) {
	var def streams.Topology
	got := []string{def.InputStream(), def.DecisionStream(), def.LeaderBucket(), def.SnapshotBucket()}
	want := []string{"TENURE_IN", "TENURE_OUT", "TENURE_LEADER", "TENURE_SNAPSHOTS"}
	if !slices.Equal(got, want) {
		t.Errorf("default names = %v, want %v", got, want)
	}
	p := streams.Topology{Prefix: "P1"}
	if p.InputStream() != "P1_IN" || p.SnapshotBucket() != "P1_SNAPSHOTS" {
		t.Errorf("prefixed names = %s, %s", p.InputStream(), p.SnapshotBucket())
	}
}

func TestEnsureRejectsBadArguments(t *testing.T) {
	js := startJS(t)
	ctx := testCtx(t)
	for _, tc := range []struct {
		name string
		top  streams.Topology
		ttl  time.Duration
	}{
		{"prefix with dot", streams.Topology{Prefix: "A.B"}, leaderTTL},
		{"prefix with wildcard", streams.Topology{Prefix: "A*"}, leaderTTL},
		{"too many replicas", streams.Topology{Replicas: 7}, leaderTTL},
		{"negative dupe window", streams.Topology{DupeWindow: -time.Second}, leaderTTL},
		{"no leader ttl", streams.Topology{}, 0},
	} {
		if _, err := streams.Ensure(ctx, js, tc.top, tc.ttl); err == nil {
			t.Errorf("%s: Ensure succeeded", tc.name)
		}
	}
	if names := streamNames(t, ctx, js); len(names) != 0 {
		t.Errorf("rejected Ensure created streams %v", names)
	}
}

func TestEnsureIsIdempotentAndLocksDown(t *testing.T) {
	js := startJS(t)
	ctx := testCtx(t)
	var top streams.Topology

	h1, err := streams.Ensure(ctx, js, top, leaderTTL)
	if err != nil {
		t.Fatalf("first Ensure: %v", err)
	}
	h2, err := streams.Ensure(ctx, js, top, leaderTTL)
	if err != nil {
		t.Fatalf("second Ensure: %v", err)
	}
	want := []string{"KV_TENURE_LEADER", "OBJ_TENURE_SNAPSHOTS", "TENURE_IN", "TENURE_OUT"}
	if got := streamNames(t, ctx, js); !slices.Equal(got, want) {
		t.Fatalf("streams = %v, want %v", got, want)
	}
	if h1.In.CachedInfo().Created != h2.In.CachedInfo().Created {
		t.Errorf("second Ensure recreated the input stream")
	}
	// The input stream is created in genesis, and Ensure leaves it so;
	// EndGenesis (the coordinator's, once its rules are stored) widens it.
	if got := h2.In.CachedInfo().Config.Subjects; !slices.Equal(got, top.GenesisSubjects()) {
		t.Fatalf("input stream created with subjects %v, want the genesis ones %v", got, top.GenesisSubjects())
	}
	if err := h2.Verify(top); err != nil {
		t.Errorf("Verify in genesis: %v", err)
	}
	if h2.In, err = streams.EndGenesis(ctx, js, top); err != nil {
		t.Fatalf("EndGenesis: %v", err)
	}

	for _, s := range []struct {
		h       jetstream.Stream
		subject string
		atomic  bool
	}{{h2.In, "tenure.in.>", false}, {h2.Out, "tenure.out.>", true}} {
		info, err := s.h.Info(ctx)
		if err != nil {
			t.Fatalf("info: %v", err)
		}
		c := info.Config
		checks := []struct {
			field string
			ok    bool
		}{
			{"Subjects", slices.Equal(c.Subjects, []string{s.subject})},
			{"Retention", c.Retention == jetstream.LimitsPolicy},
			{"MaxMsgs", c.MaxMsgs == -1},
			{"MaxBytes", c.MaxBytes == -1},
			{"MaxAge", c.MaxAge == 0},
			{"MaxMsgsPerSubject", c.MaxMsgsPerSubject == -1},
			{"Discard", c.Discard == jetstream.DiscardNew},
			{"DenyDelete", c.DenyDelete},
			{"DenyPurge", c.DenyPurge},
			{"AllowRollup", !c.AllowRollup},
			{"AllowMsgTTL", !c.AllowMsgTTL},
			{"AllowMsgSchedules", !c.AllowMsgSchedules},
			{"AllowMsgCounter", !c.AllowMsgCounter},
			{"AllowDirect", c.AllowDirect},
			{"AllowAtomicPublish", c.AllowAtomicPublish == s.atomic},
			{"Duplicates", c.Duplicates == streams.DefaultDupeWindow},
			{"Storage", c.Storage == jetstream.FileStorage},
			{"Replicas", c.Replicas == 1},
			{"PersistMode", c.PersistMode == jetstream.DefaultPersistMode},
			{"NoAck", !c.NoAck},
		}
		for _, chk := range checks {
			if !chk.ok {
				t.Errorf("%s: %s not as required: %+v", c.Name, chk.field, c)
			}
		}
	}

	st, err := h2.Leader.Status(ctx)
	if err != nil {
		t.Fatalf("leader status: %v", err)
	}
	if st.TTL() != leaderTTL || st.History() != 1 {
		t.Errorf("leader bucket TTL %v history %d, want %v and 1", st.TTL(), st.History(), leaderTTL)
	}
	if _, err := h2.Snapshots.Status(ctx); err != nil {
		t.Errorf("snapshot store status: %v", err)
	}
	if err := h2.Verify(top); err != nil {
		t.Errorf("Verify: %v", err)
	}
}

func TestEnsureUpdatesLeaderTTL(t *testing.T) {
	js := startJS(t)
	ctx := testCtx(t)
	if _, err := streams.Ensure(ctx, js, streams.Topology{}, leaderTTL); err != nil {
		t.Fatal(err)
	}
	h, err := streams.Ensure(ctx, js, streams.Topology{}, 2*leaderTTL)
	if err != nil {
		t.Fatal(err)
	}
	st, err := h.Leader.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.TTL() != 2*leaderTTL {
		t.Errorf("leader TTL = %v, want %v", st.TTL(), 2*leaderTTL)
	}
}

// TestLockedDownStreamsRefuseRemoval checks the lock-down against the server
// itself: whatever the config says, the stored messages must not be removable
// or replaceable through the API or by a publisher's headers.
func TestLockedDownStreamsRefuseRemoval(t *testing.T) {
	js := startJS(t)
	ctx := testCtx(t)
	h, err := streams.Ensure(ctx, js, streams.Topology{}, leaderTTL)
	if err != nil {
		t.Fatal(err)
	}
	if h.In, err = streams.EndGenesis(ctx, js, streams.Topology{}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		stream  jetstream.Stream
		subject string
	}{
		{h.In, "tenure.in.worker.w1.j1.acquire"},
		{h.Out, "tenure.out.w1.j1.granted"},
	} {
		name := s.stream.CachedInfo().Config.Name
		for i := 0; i < 3; i++ {
			if _, err := js.Publish(ctx, s.subject, []byte("x")); err != nil {
				t.Fatalf("%s: publish: %v", name, err)
			}
		}
		// Each attempt must fail for the lock-down's reason (codes from
		// nats-server's errors.json), not for some unrelated one.
		refused(t, name+": purge", s.stream.Purge(ctx), 10110) // JSStreamPurgeFailedF "stream purge not permitted"
		refused(t, name+": subject purge", s.stream.Purge(ctx, jetstream.WithPurgeSubject(s.subject)), 10110)
		// nats.go v1.55 flattens the API error of a delete into text, so only
		// its own sentinel is left to check (the server answers 10057,
		// JSStreamMsgDeleteFailedF "message delete not permitted").
		for _, del := range []func(context.Context, uint64) error{s.stream.DeleteMsg, s.stream.SecureDeleteMsg} {
			if err := del(ctx, 2); !errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) {
				t.Errorf("%s: delete = %v, want jetstream.ErrMsgDeleteUnsuccessful", name, err)
			}
		}

		rollup := nats.NewMsg(s.subject)
		rollup.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupAll)
		_, err := js.PublishMsg(ctx, rollup)
		refused(t, name+": roll-up", err, 10111) // JSStreamRollupFailedF "rollup not permitted"
		_, err = js.Publish(ctx, s.subject, []byte("x"), jetstream.WithMsgTTL(time.Second))
		refused(t, name+": message TTL", err, 10166) // JSMessageTTLDisabledErr
		_, err = js.Publish(ctx, s.subject, []byte("x"),
			jetstream.WithScheduleEvery(time.Second), jetstream.WithScheduleTarget(s.subject))
		refused(t, name+": schedule", err, 10188) // JSMessageSchedulesDisabledErr

		info, err := s.stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs != 3 || info.State.FirstSeq != 1 || info.State.LastSeq != 3 {
			t.Errorf("%s: state after removal attempts = %+v, want 3 messages 1..3", name, info.State)
		}
	}
}

// refused fails t unless err carries the JetStream API error code.
func refused(t *testing.T, what string, err error, code jetstream.ErrorCode) {
	t.Helper()
	var api *jetstream.APIError
	switch {
	case err == nil:
		t.Errorf("%s succeeded", what)
	case !errors.As(err, &api) || api.ErrorCode != code:
		t.Errorf("%s: %v, want API error code %d", what, err, code)
	}
}

func TestEnsureRefusesUnsafeExistingStream(t *testing.T) {
	var top streams.Topology

	for _, tc := range []struct {
		name   string
		base   func() jetstream.StreamConfig
		mutate func(*jetstream.StreamConfig)
		field  string
	}{
		{"input purge allowed", top.InputConfig, func(c *jetstream.StreamConfig) { c.DenyPurge = false }, "DenyPurge"},
		{"input delete allowed", top.InputConfig, func(c *jetstream.StreamConfig) { c.DenyDelete = false }, "DenyDelete"},
		{"input subjects differ", top.InputConfig, func(c *jetstream.StreamConfig) { c.Subjects = []string{"tenure.in.worker.>"} }, "Subjects"},
		{"input rollup allowed", top.InputConfig, func(c *jetstream.StreamConfig) { c.DenyPurge, c.AllowRollup = false, true }, "DenyPurge"},
		{"input message TTL allowed", top.InputConfig, func(c *jetstream.StreamConfig) { c.AllowMsgTTL = true }, "AllowMsgTTL"},
		// The server refuses schedules with discard new, and turning them on
		// silently turns on roll-ups and turns off DenyPurge (DESIGN.md §3):
		// the first difference found is then DenyPurge.
		{"input schedules allowed", top.InputConfig, func(c *jetstream.StreamConfig) { c.AllowMsgSchedules, c.Discard = true, jetstream.DiscardOld }, "DenyPurge"},
		{"input max age", top.InputConfig, func(c *jetstream.StreamConfig) { c.MaxAge = time.Hour }, "MaxAge"},
		{"input max msgs", top.InputConfig, func(c *jetstream.StreamConfig) { c.MaxMsgs = 1000 }, "MaxMsgs"},
		{"input work queue", top.InputConfig, func(c *jetstream.StreamConfig) { c.Retention = jetstream.WorkQueuePolicy }, "Retention"},
		{"input memory storage", top.InputConfig, func(c *jetstream.StreamConfig) { c.Storage = jetstream.MemoryStorage }, "Storage"},
		{"input short dupe window", top.InputConfig, func(c *jetstream.StreamConfig) { c.Duplicates = time.Second }, "Duplicates"},
		{"decision purge allowed", top.DecisionConfig, func(c *jetstream.StreamConfig) { c.DenyPurge = false }, "DenyPurge"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A server each: deleting a stream and at once creating one of
			// the same name races with the server's removal of its files.
			js := startJS(t)
			ctx := testCtx(t)
			cfg := tc.base()
			tc.mutate(&cfg)
			pre, err := js.CreateStream(ctx, cfg)
			if err != nil {
				t.Fatalf("pre-create: %v", err)
			}
			before := pre.CachedInfo().Config

			_, err = streams.Ensure(ctx, js, top, leaderTTL)
			var mm *streams.ConfigMismatchError
			if !errors.As(err, &mm) {
				t.Fatalf("Ensure = %v, want *ConfigMismatchError", err)
			}
			if mm.Stream != cfg.Name || mm.Field != tc.field {
				t.Errorf("mismatch = %+v, want stream %s field %s", mm, cfg.Name, tc.field)
			}
			if mm.Want == "" || mm.Got == "" || mm.Want == mm.Got {
				t.Errorf("mismatch want/got = %q/%q", mm.Want, mm.Got)
			}

			// Ensure must not have "fixed" the stream behind the operator's back.
			s, err := js.Stream(ctx, cfg.Name)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.CachedInfo().Config; !reflect.DeepEqual(got, before) {
				t.Errorf("Ensure changed the existing stream:\n got %+v\nwant %+v", got, before)
			}
		})
	}
}

func TestEnsureLeavesHarmlessDifferencesAlone(t *testing.T) {
	js := startJS(t)
	ctx := testCtx(t)
	var top streams.Topology
	cfg := top.InputConfig()
	cfg.Description = "made by hand"
	cfg.AllowDirect = false
	cfg.Duplicates = 10 * time.Minute
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	h, err := streams.Ensure(ctx, js, top, leaderTTL)
	if err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	got := h.In.CachedInfo().Config
	if got.Description != cfg.Description || got.AllowDirect || got.Duplicates != cfg.Duplicates {
		t.Errorf("Ensure changed a harmless setting: %+v", got)
	}
}

func TestOpenNeverCreates(t *testing.T) {
	js := startJS(t)
	ctx := testCtx(t)
	var top streams.Topology

	_, err := streams.Open(ctx, js, top)
	if !errors.Is(err, streams.ErrStreamNotFound) {
		t.Fatalf("Open on empty server = %v, want ErrStreamNotFound", err)
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("Open error lost the original: %v", err)
	}
	if names := streamNames(t, ctx, js); len(names) != 0 {
		t.Fatalf("Open created %v", names)
	}

	if _, err := streams.Ensure(ctx, js, top, leaderTTL); err != nil {
		t.Fatal(err)
	}
	h, err := streams.Open(ctx, js, top)
	if err != nil {
		t.Fatalf("Open after Ensure: %v", err)
	}
	if err := h.Verify(top); err != nil {
		t.Errorf("Verify: %v", err)
	}

	// A missing bucket is reported too, and not recreated.
	for _, bucket := range []struct {
		stream string
		del    func() error
	}{
		{"OBJ_TENURE_SNAPSHOTS", func() error { return js.DeleteObjectStore(ctx, top.SnapshotBucket()) }},
		{"KV_TENURE_LEADER", func() error { return js.DeleteKeyValue(ctx, top.LeaderBucket()) }},
	} {
		if err := bucket.del(); err != nil {
			t.Fatal(err)
		}
		if _, err := streams.Open(ctx, js, top); !errors.Is(err, streams.ErrStreamNotFound) {
			t.Errorf("Open without %s = %v, want ErrStreamNotFound", bucket.stream, err)
		}
		if names := streamNames(t, ctx, js); slices.Contains(names, bucket.stream) {
			t.Errorf("Open recreated %s", bucket.stream)
		}
	}
}

func TestVerifyReportsUnsafeLog(t *testing.T) {
	js := startJS(t)
	ctx := testCtx(t)
	var top streams.Topology
	in := top.InputConfig()
	in.DenyDelete = false
	for _, cfg := range []jetstream.StreamConfig{in, top.DecisionConfig()} {
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: top.LeaderBucket(), TTL: leaderTTL}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: top.SnapshotBucket()}); err != nil {
		t.Fatal(err)
	}
	h, err := streams.Open(ctx, js, top)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	var mm *streams.ConfigMismatchError
	if err := h.Verify(top); !errors.As(err, &mm) || mm.Stream != "TENURE_IN" || mm.Field != "DenyDelete" {
		t.Errorf("Verify = %v, want DenyDelete mismatch on TENURE_IN", err)
	}
}

// A sealed stream takes no more messages and can never be unsealed, and
// anyone allowed to update the input stream (a coordinator, in genesis: see
// auth/doc.go) can seal it. Ensure and Verify name it rather than let a
// coordinator go live on a log that refuses every input.
func TestEnsureAndVerifyRefuseASealedStream(t *testing.T) {
	for _, name := range []string{"TENURE_IN", "TENURE_OUT"} {
		t.Run(name, func(t *testing.T) {
			js := startJS(t)
			ctx := testCtx(t)
			var top streams.Topology
			if _, err := streams.Ensure(ctx, js, top, leaderTTL); err != nil {
				t.Fatal(err)
			}
			if _, err := streams.EndGenesis(ctx, js, top); err != nil {
				t.Fatal(err)
			}
			s, err := js.Stream(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			cfg := s.CachedInfo().Config
			cfg.Sealed = true
			if _, err := js.UpdateStream(ctx, cfg); err != nil {
				t.Fatalf("seal: %v", err)
			}

			var mm *streams.ConfigMismatchError
			if _, err := streams.Ensure(ctx, js, top, leaderTTL); !errors.As(err, &mm) || mm.Stream != name || mm.Field != "Sealed" {
				t.Errorf("Ensure = %v, want a Sealed mismatch on %s", err, name)
			}
			h, err := streams.Open(ctx, js, top)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			if err := h.Verify(top); !errors.As(err, &mm) || mm.Stream != name || mm.Field != "Sealed" {
				t.Errorf("Verify = %v, want a Sealed mismatch on %s", err, name)
			}
		})
	}
}
