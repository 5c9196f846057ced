package follow_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/follow"
	"github.com/maknow/tenure/internal/testutil"
)

// restoreSink is a follow.Restorer that records what it is fed: Restore
// moves it to restoreTo, as a read model restored from a snapshot whose
// last decision is there.
type restoreSink struct {
	mu        sync.Mutex
	pos       uint64
	applied   []uint64
	restores  int
	restoreTo uint64
	caughtUp  bool
}

func (s *restoreSink) PositionOf(uint32) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pos
}

func (s *restoreSink) Apply(_ uint32, seq uint64, _ *events.Decision) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pos = seq
	s.applied = append(s.applied, seq)
}

func (s *restoreSink) Skip(_ uint32, seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pos = seq
}

func (s *restoreSink) SetCaughtUp(uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.caughtUp = true
}

func (s *restoreSink) Restore(context.Context, uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.restores++
	s.pos = s.restoreTo
	return nil
}

// publishDecisions stores decisions from..to on subject subj (their
// causes are their numbers).
func publishDecisions(t *testing.T, ctx context.Context, js jetstream.JetStream, subj string, from, to int) {
	t.Helper()
	for i := from; i <= to; i++ {
		d := events.Decision{Cause: uint64(i), Of: 1, At: int64(i), Kind: events.KindTicked, Reason: events.ReasonOk,
			Role: events.RoleCoord, Actor: "c1", Verb: events.VerbTick, Addressee: events.NoJob, Job: events.Job{ID: events.NoJob}}
		if _, err := js.Publish(ctx, subj, events.AppendDecision(nil, &d)); err != nil {
			t.Fatal(err)
		}
	}
}

// A decision stream whose first decisions were removed (archived) is read
// by a follow.Restorer from where it restores: before the reading, when
// the stream starts after the decision that follows its position; during
// it, when the next decision handed over is not that one (a decision kept
// before the removed ones, as the last policy_set decision is). A
// Restorer is restored once each time, and is handed every decision after
// its restored position and none before.
func TestFeedRestores(t *testing.T) {
	for _, c := range []struct {
		name      string
		keepFirst bool // the stream keeps decision 1 before the removed ones
		want      []uint64
	}{
		{"stream starts later", false, []uint64{9, 10}},
		{"a gap after the first decision", true, []uint64{1, 9, 10}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, js := setup(t, true)
			first := "f.x"
			if c.keepFirst {
				first = "f.keep"
			}
			publishDecisions(t, ctx, js, first, 1, 1)
			publishDecisions(t, ctx, js, "f.x", 2, 10)
			st, err := js.Stream(ctx, "F")
			if err != nil {
				t.Fatal(err)
			}
			// Decisions below 8 are removed (on f.x only), 8 stays: where
			// the snapshot stands.
			if err := st.Purge(ctx, jetstream.WithPurgeSubject("f.x"), jetstream.WithPurgeSequence(8)); err != nil {
				t.Fatal(err)
			}
			s := &restoreSink{restoreTo: 8}
			fctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { follow.Feed(fctx, js, "F", 0, s, slog.New(slog.NewTextHandler(io.Discard, nil))); close(done) }()
			defer func() { cancel(); <-done }()
			if err := testutil.Poll(20*time.Second, func() error {
				s.mu.Lock()
				defer s.mu.Unlock()
				if !s.caughtUp || s.pos != 10 {
					return fmt.Errorf("at %d, caught up %v", s.pos, s.caughtUp)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.restores != 1 || !slices.Equal(s.applied, c.want) {
				t.Fatalf("restored %d times, applied %v; want once, %v", s.restores, s.applied, c.want)
			}
		})
	}
}
