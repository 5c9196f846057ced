package clock

import (
	"sync"
	"time"
)

// Fake is a Clock whose time moves only when Advance (or Set) moves it, for
// tests. Its timers and tickers fire, in time order, as Advance passes their
// instants; a timer armed for a duration <= 0 fires at once, as a real one
// does. Channel sends never block (the channels hold one value, like the
// runtime's, and a ticker whose receiver is behind drops ticks); AfterFunc
// functions run in goroutines of their own, as with the real clock. The
// zero Fake is not usable: create one with NewFake. Its methods are safe
// for concurrent use.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	seq    uint64 // creation order: ties fire in it
	timers map[*fakeTimer]struct{}
}

// NewFake returns a fake clock whose time is start (without its monotonic
// reading: a Fake's times compare by wall clock).
func NewFake(start time.Time) *Fake {
	return &Fake{now: start.Round(0), timers: make(map[*fakeTimer]struct{})}
}

var _ Clock = (*Fake)(nil)

// Now returns the fake's current time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Advance moves the time forward by d, firing every timer and ticker due
// on the way at its own instant (Now, seen from a function or receiver it
// wakes, is that instant until Advance goes on). A negative d is ignored.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	target := f.now.Add(max(d, 0))
	f.mu.Unlock()
	f.runUntil(target)
}

// Set moves the time forward to t, as Advance(t - Now()).
func (f *Fake) Set(t time.Time) { f.Advance(t.Sub(f.Now())) }

// Pending is the number of timers and tickers armed (created or reset and
// not stopped or fired): a test can wait until the code under test has armed
// the timer it is about to move the clock past.
func (f *Fake) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// runUntil fires, in order of their instants (then of creation), the
// timers due at or before target, and sets the time to target.
func (f *Fake) runUntil(target time.Time) {
	for {
		f.mu.Lock()
		var next *fakeTimer
		for t := range f.timers {
			if t.when.After(target) {
				continue
			}
			if next == nil || t.when.Before(next.when) || t.when.Equal(next.when) && t.seq < next.seq {
				next = t
			}
		}
		if next == nil {
			if target.After(f.now) {
				f.now = target
			}
			f.mu.Unlock()
			return
		}
		if next.when.After(f.now) {
			f.now = next.when
		}
		fn := next.fireLocked()
		f.mu.Unlock()
		if fn != nil {
			go fn()
		}
	}
}

// NewTimer returns a timer of the fake clock.
func (f *Fake) NewTimer(d time.Duration) Timer {
	return f.start(&fakeTimer{c: make(chan time.Time, 1)}, d)
}

// NewTicker returns a ticker of the fake clock; it panics if d <= 0, as
// time.NewTicker does.
func (f *Fake) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive interval for NewTicker")
	}
	return fakeTicker{f.start(&fakeTimer{c: make(chan time.Time, 1), period: d}, d)}
}

// AfterFunc returns a timer of the fake clock that calls fn in its own
// goroutine when it fires.
func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer {
	return f.start(&fakeTimer{fn: fn}, d)
}

func (f *Fake) start(t *fakeTimer, d time.Duration) *fakeTimer {
	t.f = f
	f.mu.Lock()
	f.seq++
	t.seq = f.seq
	t.when = f.now.Add(d)
	f.timers[t] = struct{}{}
	f.mu.Unlock()
	if d <= 0 {
		f.runUntil(f.Now())
	}
	return t
}

// fakeTimer is a timer (period 0) or a ticker of a Fake; fn, if set, is
// called instead of sending on c.
type fakeTimer struct {
	f      *Fake
	c      chan time.Time
	fn     func()
	period time.Duration
	seq    uint64
	when   time.Time // the next instant it fires, while armed (in f.timers)
}

// fireLocked fires t at f.now, under f.mu, and returns the function to
// call, if any.
func (t *fakeTimer) fireLocked() func() {
	f := t.f
	if t.period > 0 {
		t.when = t.when.Add(t.period)
	} else {
		delete(f.timers, t)
	}
	if t.fn != nil {
		return t.fn
	}
	select {
	case t.c <- f.now:
	default: // the receiver is behind: the value it has not read stays
	}
	return nil
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

// Stop disarms t; it reports whether t was armed. No value sent before it
// returns is received after.
func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	_, armed := t.f.timers[t]
	delete(t.f.timers, t)
	t.drainLocked()
	return armed
}

// Reset re-arms t for d from now (for a ticker, with period d); it reports
// whether t was armed. No value sent before it returns is received after.
func (t *fakeTimer) Reset(d time.Duration) bool {
	t.f.mu.Lock()
	_, armed := t.f.timers[t]
	if t.period > 0 {
		if d <= 0 {
			t.f.mu.Unlock()
			panic("clock: non-positive interval for Ticker.Reset")
		}
		t.period = d
	}
	t.when = t.f.now.Add(d)
	t.f.timers[t] = struct{}{}
	t.drainLocked()
	t.f.mu.Unlock()
	if d <= 0 {
		t.f.runUntil(t.f.Now())
	}
	return armed
}

func (t *fakeTimer) drainLocked() {
	if t.c == nil {
		return
	}
	select {
	case <-t.c:
	default:
	}
}

// fakeTicker gives a fakeTimer the Ticker method set (Stop and Reset
// without results).
type fakeTicker struct{ *fakeTimer }

func (t fakeTicker) Stop()                 { t.fakeTimer.Stop() }
func (t fakeTicker) Reset(d time.Duration) { t.fakeTimer.Reset(d) }
