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
	// The flooder's SDK says why, with a type, while its intake is full.
	w2, err := worker.Connect(a.nc, "w2", worker.WithVerdictTimeout(3*time.Second))
	if err != nil {
		t.Fatalf("w2's worker.Connect: %v", err)
	}
	// Mid-flood, w2 also floods through its SDK: small inputs (acquires)
	// from twice as many goroutines as its intake holds inputs, each
	// waiting for its verdict, until one is refused over its quota. The
	// count meets the limit whatever the raw flood does (with 32
	// goroutines, only the bytes could: their acquires fitted in the room
	// a purge of one large input left, and on two loaded cores none was
	// refused in 6 s).
	sdkErr := make(chan error, 1)
	acquirers := int64(64) // without quotas: nothing to exceed
	if q != nil {
		acquirers = 2 * q.MaxMsgs
	}
	go func() {
		// From 2 s into the raw flood to its end (10 s: with 6 s, on two
		// cores loaded by two other suites, none was refused).
		time.Sleep(2 * time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var once sync.Once
		var wg sync.WaitGroup
		for g := range acquirers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ctx.Err() == nil; i++ {
					if _, err := w2.Acquire(ctx, fmt.Sprintf("w2-%d-%d", g, i)); errors.Is(err, worker.ErrQuota) {
						once.Do(func() { sdkErr <- err })
						cancel()
					}
				}
			}()
		}
		wg.Wait()
		once.Do(func() { sdkErr <- errors.New("no acquire refused over the quota in 10 s") })
	}()
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

	if err := <-sdkErr; q != nil && !errors.Is(err, worker.ErrQuota) {
		t.Errorf("w2's Acquire while its intake is full: %v, want an error matching worker.ErrQuota", err)
	} else {
		t.Logf("w2's Acquire mid-flood: %v", err)
	}
	_ = w2.Close()
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
