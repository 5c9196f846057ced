package auth_test

// A flood costs only the flooder (issue 29, PROTOCOL.md §4.2): per-worker
// quotas the server enforces, and a coordinator that keeps its headroom.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/streams"
	"github.com/maknow/tenure/worker"
)

// testQuotas are small quotas, so that the flood meets them at once: a
// backlog of 2 MiB or 300 inputs, drained at 256 KiB and 200 inputs a
// second.
func testQuotas() *streams.Quotas {
	return &streams.Quotas{MaxBytes: 2 << 20, MaxMsgs: 300, BytesPerS: 256 << 10, MsgsPerS: 200}
}

// liveWatch records every moment the coordinator was seen not live.
type liveWatch struct {
	stop    func()
	mu      sync.Mutex
	notLive []string
	states  map[string]int // Stats.Storage.State seen, and how often
}

func watchLive(e *attackEnv) *liveWatch {
	lw := &liveWatch{states: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			st := e.c.Stats()
			lw.mu.Lock()
			if !st.Live && len(lw.notLive) < 10 {
				lw.notLive = append(lw.notLive, fmt.Sprintf("%s: %s", st.State, st.Reason))
			}
			if st.Storage != nil {
				lw.states[st.Storage.State]++
			}
			lw.mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	}()
	lw.stop = func() { cancel(); <-done }
	return lw
}

// The disk-full attack: on a server whose JetStream store is 48 MiB, w2
// floods inputs of the largest size the protocol allows, as fast as its
// connection goes, for 12 s, while the honest workers w1 and w3 acquire,
// renew and complete leases of 5 s. With quotas the server refuses w2's
// inputs once its intake is full (a clear error, worker.ErrQuota in the
// SDK), stores every honest input, the coordinator stays live and
// decides them all, and the audit is clean. Without quotas
// (TENURE_TEST_NO_QUOTAS=1, as on the code before them) the flood fills
// the store within a second or two: the coordinator loses its stream
// (insufficient resources), honest inputs are refused and leases are lost.
func TestAttackDiskFull(t *testing.T) {
	q := testQuotas()
	if os.Getenv("TENURE_TEST_NO_QUOTAS") != "" {
		q = nil
	}
	e := newAttackEnvOpts(t, attackOpts{quotas: q, maxStore: 48 << 20, coord: func(c *coordinator.Config) {
		c.StorageLimit, c.StorageReserve, c.StorageWarn = 48<<20, 8<<20, 16<<20
	}})
	h := e.startHonest(t, honestConfig{Lease: 5 * time.Second})
	lw := watchLive(e)
	a := e.attacker(t)
	js, err := jetstream.New(a.nc, jetstream.WithPublishAsyncMaxPending(256), jetstream.WithPublishAsyncTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"v":1,"lease_id":"L1","generation":1,"progress_seq":1,"value":1}`)
	for len(body) < events.MaxInputBytes {
		body = append(body, ' ')
	}
	var stored, refused, quota, other atomic.Int64
	var firstOther atomic.Value
	var pending sync.WaitGroup
	// (What w2's SDK says when its intake is full is
	// TestSDKQuotaRefusalIsTyped's: here the coordinator drains the intake
	// all along, and whether a small input then finds it full depends on
	// the race between the drain and the raw flood; on two loaded cores
	// none of 600 acquires in 10 s was refused.)
	end := time.Now().Add(12 * time.Second)
	for i := 0; time.Now().Before(end); i++ {
		f, err := js.PublishAsync(fmt.Sprintf("tenure.in.worker.w2.f-%d.progress", i), body)
		if err != nil {
			time.Sleep(time.Millisecond) // too many pending: the client's own back-pressure
			continue
		}
		pending.Add(1)
		go func() {
			defer pending.Done()
			select {
			case <-f.Ok():
				stored.Add(1)
			case err := <-f.Err():
				refused.Add(1)
				var apiErr *jetstream.APIError
				if errors.As(err, &apiErr) && apiErr.ErrorCode == 10077 {
					quota.Add(1)
				} else {
					other.Add(1)
					firstOther.CompareAndSwap(nil, err.Error())
				}
			}
		}()
	}
	pending.Wait()
	t.Logf("w2 flooded %d-byte inputs for 12 s: %d stored, %d refused (%d over its quota, %d otherwise, e.g. %v)",
		len(body), stored.Load(), refused.Load(), quota.Load(), other.Load(), firstOther.Load())

	if q != nil && quota.Load() == 0 {
		t.Errorf("no publish of the flood was refused over w2's quota")
	}
	if other.Load() > 0 {
		t.Errorf("%d of w2's publishes failed otherwise than over its quota, e.g. %v", other.Load(), firstOther.Load())
	}
	// The honest work goes on.
	h.waitProgress(t, 1, 20*time.Second)
	lw.stop()
	if len(lw.notLive) > 0 {
		t.Errorf("the coordinator was not live during the flood: %v", lw.notLive)
	}
	t.Logf("storage states seen: %v", lw.states)
	if lw.states[coordinator.StorageOK]+lw.states[coordinator.StorageLow] == 0 {
		t.Errorf("the coordinator never reported its storage: %v", lw.states)
	}
	e.checkHonest(t, h)
	e.checkEveryInputDecided(t)
}

// TestSDKQuotaRefusalIsTyped: while a worker's intake is full, the server
// refuses its next input, and the SDK says why with a type: an error
// matching worker.ErrQuota (and ErrNoVerdict, since callers retry those).
// The coordinator is stopped first, so that nothing drains the intake:
// the intake is full when the SDK publishes, whatever the machine's load.
func TestSDKQuotaRefusalIsTyped(t *testing.T) {
	q := &streams.Quotas{MaxBytes: 1 << 20, MaxMsgs: 20, BytesPerS: 256 << 10, MsgsPerS: 200}
	e := newAttackEnvOpts(t, attackOpts{quotas: q})
	a := e.attacker(t)
	w2, err := worker.Connect(a.nc, "w2", worker.WithVerdictTimeout(5*time.Second))
	if err != nil {
		t.Fatalf("w2's worker.Connect: %v", err)
	}
	defer w2.Close()
	e.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	body := []byte(`{"v":1,"lease_id":"L1","generation":1,"progress_seq":1,"value":1}`)
	intake := streams.Topology{}.IntakeStream("w2")
	for i := range q.MaxMsgs {
		ack, err := a.js.Publish(ctx, fmt.Sprintf("tenure.in.worker.w2.f-%d.progress", i), body, jetstream.WithExpectStream(intake))
		if err != nil || ack.Stream != intake {
			t.Fatalf("input %d of %d into w2's intake: %v (%+v)", i+1, q.MaxMsgs, err, ack)
		}
	}
	_, err = a.js.Publish(ctx, "tenure.in.worker.w2.f-over.progress", body, jetstream.WithExpectStream(intake))
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != 10077 {
		t.Fatalf("input %d into an intake of %d: %v, want the server's refusal 10077", q.MaxMsgs+1, q.MaxMsgs, err)
	}
	_, err = w2.Acquire(ctx, "j1")
	if !errors.Is(err, worker.ErrQuota) || !errors.Is(err, worker.ErrNoVerdict) {
		t.Fatalf("w2's Acquire while its intake is full: %v, want an error matching worker.ErrQuota and ErrNoVerdict", err)
	}
	t.Logf("w2's Acquire while its intake is full: %v", err)
}
