// Package clock is the time source of the parts of Tenure that wait: the
// coordinator's live loop (its tick, expiry, snapshot, overdue and head
// timers, the appender's timeouts, the leadership renewer) and the worker
// SDK's renew loop. They take a Clock; a nil Clock means the real one
// (Real), so production code passes nothing. Tests pass a *Fake and move
// its time with Advance.
//
// The fold (package projector) reads no clock at all: its time is the
// stored timestamp of each input.
//
// The shape follows Tailscale's tstime.Clock: a small interface over
// time.Now and the timer constructors, with the timers returned as
// interfaces so that a fake can implement them.
package clock

import "time"

// Clock is a source of time and timers.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that sends the time on its channel once d
	// has passed, as time.NewTimer.
	NewTimer(d time.Duration) Timer
	// NewTicker returns a ticker that sends the time on its channel every
	// d, as time.NewTicker; d must be > 0.
	NewTicker(d time.Duration) Ticker
	// AfterFunc calls f in its own goroutine once d has passed, as
	// time.AfterFunc; the returned timer's C is nil.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a single event, as *time.Timer. Stop and Reset have the
// semantics of Go 1.23's timers: after either returns, no stale time is
// received from C.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// Ticker is a periodic event, as *time.Ticker.
type Ticker interface {
	C() <-chan time.Time
	Stop()
	Reset(d time.Duration)
}

// OrReal returns c, or the real clock if c is nil.
func OrReal(c Clock) Clock {
	if c == nil {
		return Real{}
	}
	return c
}

// Since is the time elapsed since t on c (nil: the real clock), as
// time.Since.
func Since(c Clock, t time.Time) time.Duration { return OrReal(c).Now().Sub(t) }

// Until is the duration until t on c (nil: the real clock), as time.Until.
func Until(c Clock, t time.Time) time.Duration { return t.Sub(OrReal(c).Now()) }

// Real is the clock of package time.
type Real struct{}

// Now is time.Now.
func (Real) Now() time.Time { return time.Now() }

// NewTimer is time.NewTimer.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

// NewTicker is time.NewTicker.
func (Real) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

// AfterFunc is time.AfterFunc.
func (Real) AfterFunc(d time.Duration, f func()) Timer { return realTimer{time.AfterFunc(d, f)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

type realTicker struct{ t *time.Ticker }

func (r realTicker) C() <-chan time.Time   { return r.t.C }
func (r realTicker) Stop()                 { r.t.Stop() }
func (r realTicker) Reset(d time.Duration) { r.t.Reset(d) }
