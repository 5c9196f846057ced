package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/embedded"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
)

// env is a real Tenure for a test: an embedded nats-server, a live
// coordinator (with the UI's metrics hook) and the UI server on a real
// loopback port (so that a browser can reach it).
type env struct {
	t       testing.TB
	srv     *embedded.Server
	nc      *nats.Conn
	js      jetstream.JetStream
	coord   *coordinator.Coordinator
	metrics *Metrics
	ui      *Server
	url     string // http://127.0.0.1:port
}

func newEnv(t testing.TB, actions bool) *env {
	t.Helper()
	srv := testutil.StartServer(t)
	nc, js := testutil.Connect(t, srv.ClientURL())
	e := &env{t: t, srv: srv, nc: nc, js: js, metrics: NewMetrics()}
	c, err := coordinator.New(coordinator.Config{ID: "c1", Conn: nc, Metrics: e.metrics, LeaderTTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	e.coord = c
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = c.Run(ctx) })
	status := func(ctx context.Context) ([]CoordinatorStatus, error) {
		st := CoordinatorStatus{Stats: c.Stats(), Leader: "c1"}
		if s, err := js.Stream(ctx, "TENURE_IN"); err == nil {
			if info, err := s.Info(ctx); err == nil {
				st.InputStreamSeq = info.State.LastSeq
				st.Lag = st.InputStreamSeq - min(st.InputStreamSeq, st.InputsFolded)
			}
		}
		return []CoordinatorStatus{st}, nil
	}
	u, err := New(Config{Conn: nc, Status: status, Metrics: e.metrics, Actions: actions, FlushInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	e.ui = u
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.url = "http://" + ln.Addr().String()
	wg.Go(func() { _ = u.Serve(ctx, ln) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	testutil.WaitFor(e.t, 20*time.Second, "the coordinator to go live", func() bool { return c.Stats().Live })
	return e
}

// publish stores one input (subject without "tenure.in.") and returns its sequence.
func (e *env) publish(subject, body string) uint64 {
	e.t.Helper()
	ack, err := e.js.Publish(context.Background(), events.InputPrefix+"."+subject, []byte(body))
	if err != nil {
		e.t.Fatalf("publish %s: %v", subject, err)
	}
	return ack.Sequence
}

// decide publishes an input and waits until the UI's read model holds its
// verdicts; it returns the kind/reason of the verdict about job.
func (e *env) decide(subject, body string) (seq uint64, verdict string) {
	e.t.Helper()
	seq = e.publish(subject, body)
	parts := strings.Split(subject, ".")
	job := parts[2]
	testutil.WaitFor(e.t, 15*time.Second, fmt.Sprintf("the verdict on input %d", seq), func() bool {
		row, _, _, ok := e.ui.model.job(job, 0)
		if ok && row.LastCause >= seq {
			verdict = row.LastKind + "/" + row.LastReason
			return true
		}
		return false
	})
	return seq, verdict
}

// get fetches path from the UI and decodes its JSON into v (if not nil).
func (e *env) get(path string, v any) int {
	e.t.Helper()
	resp, err := http.Get(e.url + path)
	if err != nil {
		e.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if v != nil && len(b) > 0 {
		if err := json.Unmarshal(b, v); err != nil {
			e.t.Fatalf("GET %s: %v\n%s", path, err, b)
		}
	}
	return resp.StatusCode
}

// post sends body as JSON to path, as the UI's own pages do, and decodes the answer.
func (e *env) post(path string, body any, v any) int {
	e.t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, e.url+path, strings.NewReader(string(b)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(resp.Body)
	if v != nil && len(rb) > 0 {
		if err := json.Unmarshal(rb, v); err != nil {
			e.t.Fatalf("POST %s: %v\n%s", path, err, rb)
		}
	}
	return resp.StatusCode
}

// row is job's row in the UI's read model (it fails the test if there is none).
func (e *env) row(job string) Row {
	e.t.Helper()
	r, _, _, ok := e.ui.model.job(job, 0)
	if !ok {
		e.t.Fatalf("no job %s in the read model", job)
	}
	return r
}
