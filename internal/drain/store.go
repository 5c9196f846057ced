package drain

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/maknow/tenure/worker"
)

// Store is the side effect of the drained jobs: one value per job, the
// fencing token of the attempt that wrote it last. Writes are admitted by
// a worker.Fence: a write from a generation older than one the Store has
// admitted for the job is refused. Every write, admitted or refused, is
// recorded in order. The zero value is ready; it is safe for concurrent
// use.
type Store struct {
	mu     sync.Mutex
	fence  worker.Fence
	writes []Write
}

// Write is one write request the Store received, in arrival order.
type Write struct {
	Worker   string
	Token    worker.FencingToken
	Accepted bool
}

// Write admits (or refuses) the effect of worker's attempt t, recording
// it; a refusal matches worker.ErrStaleGeneration.
func (s *Store) Write(wk string, t worker.FencingToken) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.fence.Admit(t)
	s.writes = append(s.writes, Write{Worker: wk, Token: t, Accepted: err == nil})
	return err
}

// Writes returns every write so far, in order.
func (s *Store) Writes() []Write {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Write(nil), s.writes...)
}

// Serve answers write requests on subject (WriteEffect's): "ok", or
// "stale: ..." for a refused write.
func (s *Store) Serve(nc *nats.Conn, subject string) (*nats.Subscription, error) {
	return nc.Subscribe(subject, func(m *nats.Msg) {
		wk, tok, ok := strings.Cut(string(m.Data), " ")
		t, err := worker.ParseFencingToken(tok)
		switch {
		case !ok || err != nil:
			_ = m.Respond([]byte("bad request"))
		case s.Write(wk, t) != nil:
			_ = m.Respond([]byte("stale: a newer generation of " + t.Job + " wrote"))
		default:
			_ = m.Respond([]byte("ok"))
		}
	})
}

// ErrRefused is the error of a write the Store refused.
var ErrRefused = errors.New("drain: write refused")

// WriteEffect asks the Store serving subject to write worker's effect
// under token t: nil once written, an error matching ErrRefused when it
// was refused, another error when no answer came within timeout (the
// write may or may not have been made).
func WriteEffect(nc *nats.Conn, subject, worker string, t worker.FencingToken, timeout time.Duration) error {
	m, err := nc.Request(subject, []byte(worker+" "+t.String()), timeout)
	if err != nil {
		return fmt.Errorf("drain: write %s: %w", t, err)
	}
	if string(m.Data) != "ok" {
		return fmt.Errorf("%w: %s: %s", ErrRefused, t, m.Data)
	}
	return nil
}
