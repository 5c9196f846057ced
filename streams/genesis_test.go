package streams_test

import (
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/streams"
)

func TestGenesisSubjects(t *testing.T) {
	if got, want := (streams.Topology{}).GenesisSubjects(), []string{"tenure.in.coord.*._.rules", "tenure.in.coord.*._.policy"}; !slices.Equal(got, want) {
		t.Errorf("unpartitioned genesis subjects %v, want %v", got, want)
	}
	p := streams.Topology{}.Partitions(4)[2]
	if got, want := p.GenesisSubjects(), []string{"tenure.in.coord.*._.rules.2", "tenure.in.coord.*._.policy.2"}; !slices.Equal(got, want) {
		t.Errorf("partition 2 genesis subjects %v, want %v", got, want)
	}
	// Only the coordinator's role: no worker or ops subject matches.
	for _, s := range p.GenesisSubjects() {
		for _, r := range []events.Role{events.RoleWorker, events.RoleOps} {
			if subjectMatches(s, p.Partition.InputSubject(r, "x", events.NoJob, events.VerbPolicy)) {
				t.Errorf("genesis subject %s matches role %s's inputs", s, r)
			}
		}
	}
}

// subjectMatches reports whether NATS subject filter f (with * tokens, no
// >) matches subject s.
func subjectMatches(f, s string) bool {
	ft, st := splitDots(f), splitDots(s)
	if len(ft) != len(st) {
		return false
	}
	for i := range ft {
		if ft[i] != "*" && ft[i] != st[i] {
			return false
		}
	}
	return true
}

func splitDots(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '.' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}

// A new input stream is in genesis: Ensure, Open and Verify accept it and
// leave it so, only the coordinators' rules and policy are stored, and
// EndGenesis widens it, changing nothing else, once and idempotently.
func TestEnsureCreatesTheInputStreamInGenesis(t *testing.T) {
	js := startJS(t)
	ctx := testCtx(t)
	var top streams.Topology
	h, err := streams.Ensure(ctx, js, top, leaderTTL)
	if err != nil {
		t.Fatal(err)
	}
	genesis := h.In.CachedInfo().Config
	if !top.InGenesis(genesis) {
		t.Fatalf("new input stream's subjects %v, want %v", genesis.Subjects, top.GenesisSubjects())
	}
	// A standby's or a restarted serve's Ensure, an auditor's Open and
	// Verify: no ConfigMismatchError, and the stream stays in genesis.
	for i := range 2 {
		h, err := streams.Ensure(ctx, js, top, leaderTTL)
		if err != nil {
			t.Fatalf("Ensure %d on a stream in genesis: %v", i+2, err)
		}
		if err := h.Verify(top); err != nil {
			t.Fatalf("Verify in genesis: %v", err)
		}
	}
	oh, err := streams.Open(ctx, js, top)
	if err != nil {
		t.Fatal(err)
	}
	if err := oh.Verify(top); err != nil {
		t.Fatalf("Verify after Open in genesis: %v", err)
	}
	if !top.InGenesis(oh.In.CachedInfo().Config) {
		t.Fatalf("Ensure widened the stream: %v", oh.In.CachedInfo().Config.Subjects)
	}
	for _, s := range []string{
		"tenure.in.worker.w1.j1.acquire", "tenure.in.ops.op1.j1.offer", "tenure.in.coord.c1._.tick",
		"tenure.in.coord.c1.j1.rules", "tenure.in.worker.c1._.rules",
	} {
		if _, err := js.Publish(ctx, s, []byte(`{"v":1}`)); !errors.Is(streams.Classify(err), streams.ErrNoResponders) || !errors.Is(streams.Classify(err), streams.ErrTransient) {
			t.Errorf("publish %s in genesis: %v, want no responders", s, err)
		}
	}
	for _, s := range []string{"tenure.in.coord.c1._.rules", "tenure.in.coord.c1._.policy"} {
		if _, err := js.Publish(ctx, s, []byte(`{"v":1}`)); err != nil {
			t.Errorf("publish %s in genesis: %v", s, err)
		}
	}

	s, err := streams.EndGenesis(ctx, js, top)
	if err != nil {
		t.Fatalf("EndGenesis: %v", err)
	}
	wide := s.CachedInfo().Config
	if !slices.Equal(wide.Subjects, []string{events.InputFilter}) {
		t.Fatalf("subjects after EndGenesis %v, want [%s]", wide.Subjects, events.InputFilter)
	}
	genesis.Subjects, wide.Subjects = nil, nil
	if !reflect.DeepEqual(genesis, wide) {
		t.Errorf("EndGenesis changed more than the subjects:\n before %+v\n after  %+v", genesis, wide)
	}
	if _, err := streams.EndGenesis(ctx, js, top); err != nil {
		t.Fatalf("EndGenesis again: %v", err)
	}
	h, err = streams.Ensure(ctx, js, top, leaderTTL)
	if err != nil {
		t.Fatalf("Ensure after EndGenesis: %v", err)
	}
	if err := h.Verify(top); err != nil {
		t.Fatalf("Verify after EndGenesis: %v", err)
	}
	if _, err := js.Publish(ctx, "tenure.in.worker.w1.j1.acquire", []byte(`{"v":1}`)); err != nil {
		t.Fatalf("publish after genesis: %v", err)
	}
	if st := s.CachedInfo().State; st.Msgs != 2 {
		t.Fatalf("stored in genesis: %d inputs, want 2", st.Msgs)
	}
}

// Neither Ensure nor Verify nor EndGenesis accepts an input stream whose
// subjects are neither the genesis ones nor the topology's, and EndGenesis
// does not widen such a stream.
func TestInputStreamWithOtherSubjectsIsRefused(t *testing.T) {
	var top streams.Topology
	for _, subjects := range [][]string{
		{"tenure.in.coord.>"},
		{"tenure.in.coord.*._.rules"},
		append(top.GenesisSubjects(), "tenure.in.ops.>"),
		{"tenure.in.worker.>", "tenure.in.ops.>", "tenure.in.coord.>"},
		{"tenure.in.coord.*._.rules.0", "tenure.in.coord.*._.policy.0"}, // a partition's genesis
	} {
		t.Run(subjects[0], func(t *testing.T) {
			js := startJS(t)
			ctx := testCtx(t)
			in := top.InputConfig()
			in.Subjects = subjects
			if _, err := js.CreateStream(ctx, in); err != nil {
				t.Fatal(err)
			}
			var mm *streams.ConfigMismatchError
			if _, err := streams.Ensure(ctx, js, top, leaderTTL); !errors.As(err, &mm) || mm.Stream != "TENURE_IN" || mm.Field != "Subjects" {
				t.Errorf("Ensure = %v, want a Subjects mismatch on TENURE_IN", err)
			}
			if _, err := streams.EndGenesis(ctx, js, top); !errors.As(err, &mm) || mm.Field != "Subjects" {
				t.Errorf("EndGenesis = %v, want a Subjects mismatch", err)
			}
			s, err := js.Stream(ctx, "TENURE_IN")
			if err != nil {
				t.Fatal(err)
			}
			if got := s.CachedInfo().Config.Subjects; !slices.Equal(got, subjects) {
				t.Errorf("subjects changed to %v", got)
			}
			if _, err := js.CreateStream(ctx, top.DecisionConfig()); err != nil {
				t.Fatal(err)
			}
			if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: top.LeaderBucket(), TTL: leaderTTL}); err != nil {
				t.Fatal(err)
			}
			if _, err := js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: top.SnapshotBucket()}); err != nil {
				t.Fatal(err)
			}
			h, err := streams.Open(ctx, js, top)
			if err != nil {
				t.Fatal(err)
			}
			if err := h.Verify(top); !errors.As(err, &mm) || mm.Stream != "TENURE_IN" || mm.Field != "Subjects" {
				t.Errorf("Verify = %v, want a Subjects mismatch on TENURE_IN", err)
			}
		})
	}
}

// Each partition's input stream has its own genesis; EndGenesis of one
// leaves the others in genesis.
func TestGenesisPerPartition(t *testing.T) {
	js := startJS(t)
	ctx := testCtx(t)
	parts := streams.Topology{}.Partitions(3)
	if _, err := streams.EnsureAll(ctx, js, streams.Topology{}, 3, leaderTTL); err != nil {
		t.Fatal(err)
	}
	if _, err := streams.EndGenesis(ctx, js, parts[1]); err != nil {
		t.Fatal(err)
	}
	for i, pt := range parts {
		s, err := js.Stream(ctx, pt.InputStream())
		if err != nil {
			t.Fatal(err)
		}
		cfg := s.CachedInfo().Config
		if open := slices.Equal(cfg.Subjects, []string{pt.Partition.InputFilter()}); open != (i == 1) || !open && !pt.InGenesis(cfg) {
			t.Errorf("%s: subjects %v", pt.InputStream(), cfg.Subjects)
		}
	}
	hs, err := streams.EnsureAll(ctx, js, streams.Topology{}, 3, leaderTTL)
	if err != nil {
		t.Fatalf("EnsureAll on partitions in and out of genesis: %v", err)
	}
	for i, h := range hs {
		if err := h.Verify(parts[i]); err != nil {
			t.Errorf("Verify %s: %v", parts[i].Partition, err)
		}
	}
}
