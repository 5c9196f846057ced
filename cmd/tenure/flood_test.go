package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/auth"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	sdk "github.com/maknow/tenure/worker"
)

// connStats returns the server's view of the client connection named
// name: its id and the messages the server sent it.
func connStats(t *testing.T, srv *server.Server, name string) (cid, outMsgs uint64) {
	t.Helper()
	cz, err := srv.Connz(&server.ConnzOptions{Limit: 1024})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cz.Conns {
		if c.Name == name {
			return c.Cid, uint64(c.OutMsgs)
		}
	}
	t.Fatalf("no connection named %s", name)
	return 0, 0
}

// A worker (under tenure auth init's credentials) that creates push
// consumers of its own decisions delivering to the coordinator's status
// subject and to $SRV.STATS, over and over, floods only serve's service
// connection: the coordinator's own connection receives none of it (the
// server sends it no more messages than the honest load needs), keeps its
// connection (no slow consumer), and an honest worker's verdicts keep
// arriving. (Before, the responders shared the coordinator's connection,
// which received every pushed decision: a slow consumer, and honest
// verdicts ten times slower.)
func TestPushConsumerFloodSparesTheCoordinator(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// (w1's 2,000 acquires at once fit in its intake: a backlog of 4,000
	// inputs, where the default is 500.)
	if code, _, stderr := runAuthCmd("init", "--out", dir, "--worker", "w1,w2", "--dispatcher", "disp", "--bcrypt-cost", "4", "--quota-msgs", "4000"); code != 0 {
		t.Fatalf("auth init: exit %d: %s", code, stderr)
	}
	cred := func(name string) auth.Credential {
		c, err := auth.ReadCredential(filepath.Join(dir, name+".creds.json"))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	srv := testutil.StartServer(t, testutil.ConfigFile(filepath.Join(dir, "server.conf")))
	url := srv.ClientURL()
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--nats-url", url, "--id", "coord", "--credential", filepath.Join(dir, "coord.creds.json")}, &bytes.Buffer{}, &logs)
	}()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("serve did not stop")
		}
	}()
	waitServing(t, &logs, done, regexp.MustCompile(`connect workers to (nats://127\.0\.0\.1:\d+)`))
	defer func() {
		if t.Failed() {
			t.Logf("serve's log:\n%s", logs.String())
		}
	}()
	runGenesisAs(t, dir, url)
	dnc, err := cred("disp").Connect(url, nats.Timeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer dnc.Close()
	if err := testutil.Poll(30*time.Second, func() error { return statusLive(dnc, "tenure.status.coord") }); err != nil {
		t.Fatalf("coordinator not live: %v\n%s", err, logs.String())
	}
	djs, err := jetstream.New(dnc)
	if err != nil {
		t.Fatal(err)
	}

	// The hostile worker's own decisions: one grant per acquire.
	const decisions = 2000
	h := cred("w1")
	hnc, err := h.Connect(url, nats.Timeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer hnc.Close()
	hjs, err := jetstream.NewWithAPIPrefix(hnc, h.JetStreamAPIPrefix)
	if err != nil {
		t.Fatal(err)
	}
	for i := range decisions {
		if _, err := hjs.PublishAsync(fmt.Sprintf("tenure.in.worker.w1.flood-%d.acquire", i), []byte(`{"v":1,"lease_ms":600000}`)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-hjs.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		t.Fatal("the acquires were not all stored")
	}
	testutil.WaitFor(t, 30*time.Second, "the grants stored", func() bool {
		s, err := djs.Stream(ctx, "TENURE_OUT")
		return err == nil && s.CachedInfo().State.Msgs >= decisions
	})

	ns := srv.Server()
	cid, before := connStats(t, ns, "tenure-coordinator-coord")

	// The honest worker, acquiring and completing while the flood goes on.
	hon := cred("w2")
	wnc, err := hon.Connect(url, nats.Timeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer wnc.Close()
	w2, err := sdk.Connect(wnc, "w2")
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	honest := make(chan error, 1)
	floodDone := make(chan struct{})
	go func() {
		n := 0
		for {
			actx, acancel := context.WithTimeout(ctx, 10*time.Second)
			l, err := w2.Acquire(actx, fmt.Sprintf("honest-%d", n), sdk.WithLeaseDuration(time.Minute))
			if err == nil {
				err = l.Complete(actx, events.OutcomeSuccess, "")
			}
			acancel()
			if err != nil {
				honest <- fmt.Errorf("honest lease %d: %w", n, err)
				return
			}
			n++
			select {
			case <-floodDone:
				if n < 5 {
					continue
				}
				honest <- nil
				return
			default:
			}
		}
	}()

	// The flood: each of w1's four consumers, again and again, pushes all
	// its decisions to a subject the coordinator's service answers.
	const rounds = 4
	targets := []string{"tenure.status.coord", "$SRV.STATS", "tenure.status.coord", "$SRV.STATS.tenure"}
	pushed := 0
	var last string
	defer func() {
		if t.Failed() {
			t.Logf("last consumer info: %s", last)
		}
	}()
	for range rounds {
		for i, target := range targets {
			name := events.WorkerConsumerName("w1", i)
			cfg := map[string]any{
				"durable_name": name, "name": name, "filter_subject": events.AddresseeFilter("w1"), "deliver_subject": target,
				"deliver_policy": "all", "ack_policy": "none", "replay_policy": "instant",
			}
			if target == "tenure.status.coord" {
				cfg["deliver_group"] = "q" // the micro endpoint's queue group
			}
			body, _ := json.Marshal(map[string]any{"stream_name": "TENURE_OUT", "config": cfg})
			api := h.JetStreamAPIPrefix + ".CONSUMER."
			resp, err := hnc.Request(api+"CREATE.TENURE_OUT."+name+"."+events.AddresseeFilter("w1"), body, 10*time.Second)
			if err != nil {
				t.Fatalf("push consumer %s: %v", name, err)
			}
			var created struct {
				Error *struct{ Description string } `json:"error"`
			}
			if json.Unmarshal(resp.Data, &created) != nil || created.Error != nil {
				t.Fatalf("push consumer %s: %s", name, resp.Data)
			}
			// Delivered: then deleted, to push them all again.
			testutil.WaitFor(t, 30*time.Second, "the push consumer's deliveries", func() bool {
				m, err := hnc.Request(api+"INFO.TENURE_OUT."+name, nil, 5*time.Second)
				var info struct {
					Delivered struct {
						Consumer uint64 `json:"consumer_seq"`
					} `json:"delivered"`
				}
				ok := err == nil && json.Unmarshal(m.Data, &info) == nil && info.Delivered.Consumer >= decisions
				if !ok && err == nil {
					last = string(m.Data)
				}
				return ok
			})
			pushed += decisions
			if _, err := hnc.Request(api+"DELETE.TENURE_OUT."+name, nil, 10*time.Second); err != nil {
				t.Fatalf("delete %s: %v", name, err)
			}
		}
	}
	close(floodDone)
	select {
	case err := <-honest:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the honest worker's verdicts stopped")
	}
	cid2, after := connStats(t, ns, "tenure-coordinator-coord")
	if cid2 != cid {
		t.Errorf("the coordinator's connection was replaced (%d, then %d): the server closed it", cid, cid2)
	}
	// The honest load (the inputs of a few leases, their appends' acks,
	// the leadership) is some hundreds of messages.
	if got := after - before; got > uint64(pushed)/10 {
		t.Errorf("the server sent the coordinator's connection %d messages while %d decisions were pushed at the service subjects", got, pushed)
	}
	// The status endpoint may have dropped requests with the flood (that
	// is its bounded backlog); it answers again once the flood is over.
	if err := testutil.Poll(20*time.Second, func() error { return statusLive(dnc, "tenure.status.coord") }); err != nil {
		t.Errorf("coordinator after the flood: %v", err)
	}
}
