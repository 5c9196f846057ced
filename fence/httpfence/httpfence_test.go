package httpfence_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/coordinator/coordtest"
	"github.com/maknow/tenure/fence"
	"github.com/maknow/tenure/fence/httpfence"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/worker"
)

func TestDocs(t *testing.T) { testutil.RequireDocs(t, ".") }

// server is a payments API behind the fence: POST /pay/<job> counts.
func server(t *testing.T) (*httptest.Server, *httpfence.Memory, *atomic.Int64) {
	var paid atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("POST /pay/{job}", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("fail") != "" {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		paid.Add(1)
		w.WriteHeader(http.StatusCreated)
	})
	mux.HandleFunc("POST /claim", func(w http.ResponseWriter, r *http.Request) { t.Error("a claim reached the handler") })
	mem := httpfence.NewMemory("payments")
	srv := httptest.NewServer(httpfence.Handler(mux, mem, func(o *httpfence.Options) {
		o.Job = func(r *http.Request) string {
			if job, ok := strings.CutPrefix(r.URL.Path, "/pay/"); ok {
				return job
			}
			return ""
		}
	}))
	t.Cleanup(srv.Close)
	return srv, mem, &paid
}

func bound(t *testing.T, c *httpfence.Client, l fence.Lease) *httpfence.Bound {
	t.Helper()
	ctx, err := c.Bind(context.Background(), l)
	if err != nil {
		t.Fatalf("bind %v: %v", l.Token(), err)
	}
	return httpfence.From(ctx)
}

func pay(b *httpfence.Bound, url, job, key string) error {
	req, _ := http.NewRequest(http.MethodPost, url+"/pay/"+job, nil)
	resp, err := b.Do(req, key)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// The attacks, over HTTP: each refused with the typed error before the
// handler runs; a failed answer leaves its key free; the receipts are the
// effects the handler answered 2xx to.
func TestMiddleware(t *testing.T) {
	srv, mem, paid := server(t)
	c := &httpfence.Client{HTTP: srv.Client()}
	soon := time.Now().Add(time.Minute)
	fixed := func(job, id string, gen uint64, dl time.Time) fence.Fixed {
		return fence.Fixed{T: fence.Token{Job: job, LeaseID: id, Generation: gen}, Deadline: dl}
	}
	g1 := bound(t, c, fixed("j", "L10-a", 1, soon))
	if err := pay(g1, srv.URL, "j", "charge-1"); err != nil {
		t.Fatal(err)
	}
	claimer := &httpfence.Client{HTTP: srv.Client(), ClaimURL: srv.URL + "/claim"}
	g2 := bound(t, claimer, fixed("j", "L20-b", 2, soon)) // claims j
	for _, c := range []struct {
		name string
		b    *httpfence.Bound
		job  string
		key  string
		want error
	}{
		{"generation 1 after generation 2 claimed", g1, "j", "charge-2", worker.ErrStaleGeneration},
		{"another lease id for generation 2", bound(t, c, fixed("j", "L20-c", 2, soon)), "j", "charge-2", fence.ErrMismatch},
		{"a later lease with generation 2", bound(t, c, fixed("j", "L30-c", 2, soon)), "j", "charge-2", fence.ErrMismatch},
		{"a token of job j for job k's route", g2, "k", "charge-2", fence.ErrMismatch},
		{"past its deadline", bound(t, c, fixed("j", "L20-b", 2, time.Now().Add(-time.Second))), "j", "charge-2", worker.ErrExpired},
		{"a replay of charge-1", g2, "j", "charge-1", fence.ErrReplay},
		{"a bad key", g2, "j", "a b", fence.ErrBadEffect},
	} {
		if err := pay(c.b, srv.URL, c.job, c.key); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	// No refusal names the lease the server holds: a stale client told
	// the newer token could send its write again under it.
	raw, _ := http.NewRequest(http.MethodPost, srv.URL+"/pay/j", nil)
	raw.Header.Set(httpfence.HeaderFence, "j/L10-a/1")
	raw.Header.Set(httpfence.HeaderKey, "charge-9")
	resp, err := srv.Client().Do(raw)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict || strings.Contains(string(body), "L20-b") || strings.Contains(fmt.Sprint(resp.Header), "L20-b") {
		t.Fatalf("a stale refusal: %s %v %q", resp.Status, resp.Header, body)
	}
	// A failed answer does not spend the key.
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/pay/j?fail=1", nil)
	if resp, err := g2.Do(req, "charge-2"); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("failing request: %v %v", resp, err)
	}
	if err := pay(g2, srv.URL, "j", "charge-2"); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if err := pay(g2, srv.URL, "j", "charge-2"); !fence.CommittedBy(err, g2.Lease().Token()) {
		t.Fatalf("second retry: %v, want a replay by generation 2", err)
	}
	if paid.Load() != 2 {
		t.Fatalf("%d payments, want 2", paid.Load())
	}
	// Bad headers, raw.
	for _, h := range []map[string]string{
		{},
		{httpfence.HeaderFence: "j/L1/9007199254740992", httpfence.HeaderKey: "k"},
		{httpfence.HeaderFence: "j/L1/18446744073709551616", httpfence.HeaderKey: "k"},
		{httpfence.HeaderFence: "j/L1/1"},
		{httpfence.HeaderFence: "j/L90/3", httpfence.HeaderKey: "k", httpfence.HeaderDeadline: "tomorrow"},
	} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/pay/j", nil)
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get(httpfence.HeaderRefused) == "" {
			t.Errorf("%v: %s", h, resp.Status)
		}
	}
	rs := mem.Receipts()
	if len(rs) != 2 || rs[0].Effect != "charge-1" || rs[1].Effect != "charge-2" || rs[1].Generation != 2 {
		t.Fatalf("receipts %+v", rs)
	}
}

// A worker whose renewals stopped writes after a newer generation started
// and claimed the job through worker.Run's binding: refused.
func TestPausedWorker(t *testing.T) {
	srv, _, paid := server(t)
	nsrv := testutil.StartServer(t)
	cnc, err := nats.Connect(nsrv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cnc.Close)
	coordtest.RunGroup(t, coordinator.Config{ID: "c1", Conn: cnc}, 0, 15*time.Second)
	nc, _ := testutil.Connect(t, nsrv.ClientURL())
	ctx := context.Background()
	c := &httpfence.Client{HTTP: srv.Client(), ClaimURL: srv.URL + "/claim"}
	w1, err := worker.Connect(nc, "w1")
	if err != nil {
		t.Fatal(err)
	}
	l1, err := w1.Acquire(ctx, "job", worker.WithLeaseDuration(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	b1 := bound(t, c, l1)
	w1.Close() // paused: no more renewals
	w2, err := worker.Connect(nc, "w2")
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	var l2 *worker.Lease
	if err := testutil.Poll(20*time.Second, func() (err error) {
		l2, err = w2.Acquire(ctx, "job", worker.WithLeaseDuration(time.Minute))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	bound(t, c, l2)
	if err := pay(b1, srv.URL, "job", "charge"); !errors.Is(err, worker.ErrStaleGeneration) {
		t.Fatalf("the paused worker's request: %v", err)
	}
	if paid.Load() != 0 {
		t.Fatal("paid")
	}
}
