package clock_test

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/maknow/tenure/clock"
	"github.com/maknow/tenure/internal/testutil"
)

func TestDocs(t *testing.T) { testutil.RequireDocs(t, ".") }

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func recv(c <-chan time.Time) (time.Time, bool) {
	select {
	case v := <-c:
		return v, true
	default:
		return time.Time{}, false
	}
}

func TestOrRealNil(t *testing.T) {
	if _, ok := clock.OrReal(nil).(clock.Real); !ok {
		t.Fatal("OrReal(nil) is not the real clock")
	}
	f := clock.NewFake(t0)
	if clock.OrReal(f) != clock.Clock(f) {
		t.Fatal("OrReal(f) is not f")
	}
	if got := clock.Since(f, t0.Add(-time.Second)); got != time.Second {
		t.Fatalf("Since = %v, want 1s", got)
	}
	if got := clock.Until(f, t0.Add(time.Minute)); got != time.Minute {
		t.Fatalf("Until = %v, want 1m", got)
	}
}

func TestFakeTimer(t *testing.T) {
	f := clock.NewFake(t0)
	tm := f.NewTimer(time.Second)
	if f.Pending() != 1 {
		t.Fatalf("Pending = %d, want 1", f.Pending())
	}
	f.Advance(999 * time.Millisecond)
	if _, ok := recv(tm.C()); ok {
		t.Fatal("fired before its instant")
	}
	f.Advance(time.Millisecond)
	if v, ok := recv(tm.C()); !ok || !v.Equal(t0.Add(time.Second)) {
		t.Fatalf("fired %v %v, want at %v", v, ok, t0.Add(time.Second))
	}
	if f.Pending() != 0 || tm.Stop() {
		t.Fatal("a fired timer is still armed")
	}
	// Reset discards a value not received yet (Go 1.23 semantics).
	tm.Reset(time.Second)
	f.Advance(time.Second)
	if tm.Reset(time.Hour) { // fired: not armed any more
		t.Fatal("Reset of a fired timer reports it armed")
	}
	if _, ok := recv(tm.C()); ok {
		t.Fatal("a stale value survived Reset")
	}
	if !tm.Stop() {
		t.Fatal("Stop of an armed timer reports it not armed")
	}
	f.Advance(2 * time.Hour)
	if _, ok := recv(tm.C()); ok {
		t.Fatal("a stopped timer fired")
	}
	// A timer for a duration <= 0 fires at once.
	if _, ok := recv(f.NewTimer(-time.Second).C()); !ok {
		t.Fatal("a timer for a past instant did not fire at once")
	}
}

func TestFakeOrderAndNow(t *testing.T) {
	f := clock.NewFake(t0)
	a := f.NewTimer(3 * time.Second)
	b := f.NewTimer(time.Second)
	f.Advance(5 * time.Second)
	va, _ := recv(a.C())
	vb, _ := recv(b.C())
	if !vb.Before(va) || !va.Equal(t0.Add(3*time.Second)) || !f.Now().Equal(t0.Add(5*time.Second)) {
		t.Fatalf("a at %v, b at %v, now %v", va, vb, f.Now())
	}
}

func TestFakeTicker(t *testing.T) {
	f := clock.NewFake(t0)
	tk := f.NewTicker(time.Second)
	var got []time.Time
	for range 3 {
		f.Advance(time.Second)
		v, ok := recv(tk.C())
		if !ok {
			t.Fatal("no tick")
		}
		got = append(got, v)
	}
	if !got[2].Equal(t0.Add(3 * time.Second)) {
		t.Fatalf("ticks %v", got)
	}
	// A receiver behind gets one tick, not a backlog.
	f.Advance(10 * time.Second)
	if _, ok := recv(tk.C()); !ok {
		t.Fatal("no tick after 10 s")
	}
	if _, ok := recv(tk.C()); ok {
		t.Fatal("a backlog of ticks")
	}
	tk.Reset(time.Minute)
	f.Advance(59 * time.Second)
	if _, ok := recv(tk.C()); ok {
		t.Fatal("Reset did not change the period")
	}
	f.Advance(time.Second)
	if _, ok := recv(tk.C()); !ok {
		t.Fatal("no tick at the new period")
	}
	tk.Stop()
	f.Advance(time.Hour)
	if _, ok := recv(tk.C()); ok || f.Pending() != 0 {
		t.Fatal("a stopped ticker ticked")
	}
}

// TestFakeAfterFunc runs in a synctest bubble so that synctest.Wait can
// tell when the function's goroutine has run (it runs in its own, as with
// the real clock).
func TestFakeAfterFunc(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := clock.NewFake(t0)
		var n atomic.Int32
		tm := f.AfterFunc(time.Second, func() { n.Add(1) })
		if tm.C() != nil {
			t.Fatal("an AfterFunc timer has a channel")
		}
		f.Advance(time.Second)
		synctest.Wait()
		if n.Load() != 1 {
			t.Fatalf("called %d times, want 1", n.Load())
		}
		tm.Reset(time.Second)
		tm.Stop()
		f.Advance(time.Hour)
		synctest.Wait()
		if n.Load() != 1 {
			t.Fatalf("called %d times after Stop, want 1", n.Load())
		}
	})
}

// TestRealClock checks that Real is package time's clock, in a bubble
// (where package time's clock is the bubble's, and moves deterministically).
func TestRealClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := clock.OrReal(nil)
		start := c.Now()
		tm := c.NewTimer(time.Second)
		v := <-tm.C()
		if got := v.Sub(start); got != time.Second {
			t.Fatalf("timer fired after %v, want 1s", got)
		}
		tk := c.NewTicker(time.Minute)
		defer tk.Stop()
		<-tk.C()
		if got := clock.Since(nil, start); got != time.Minute+time.Second {
			t.Fatalf("Since = %v", got)
		}
		done := make(chan struct{})
		c.AfterFunc(time.Hour, func() { close(done) })
		<-done
	})
}
