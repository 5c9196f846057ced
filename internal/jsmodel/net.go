package jsmodel

import (
	"cmp"
	"context"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"
)

// Net carries every request to the model and every reply from it, and
// every message a reader reads. Each is an operation with a time it is
// due and a lane: the operations of one lane go in order (a connection's
// publishes, a reader's messages, a stream's replies to one actor), and
// the simulator applies one due operation at a time (Step), choosing
// among the lanes' first ones with the seed's generator, so that the
// order of everything the actors see is the seed's (faults included).
type Net struct {
	mu     sync.Mutex
	model  *Model
	seed   uint64
	rng    *rand.Rand            // the choices of the net's loop
	lanes  map[string]*rand.Rand // each lane's delays: drawn in its own order, whoever else submits meanwhile
	faults Faults
	ops    []*op
	next   uint64
	kick   chan struct{}
	cut    map[string]time.Time     // actor -> cut off until
	held   map[string]time.Time     // lane -> held until (Hold)
	slow   map[string]time.Duration // lane prefix -> added delay (Slow)
	// Counts is how often each fault was injected (by kind), and Seen
	// how often each rare path the simulator asks about was reached
	// (Touch).
	Counts map[string]int
	Seen   map[string]int
	// Trace, when not nil, records every operation applied: its time and
	// lane (to find where two runs of one seed part).
	Trace *[]string
	// Stopped, once set, injects no more faults (the run's quiet end).
	stopped bool
	// observers of every append the decision stream acknowledged
	// (Appended).
	onAppend []func(actor string, first, last uint64)
	readers  []*reader
	crashes  uint64 // LoseTails: the server's crashes (Backend.Reconnects)
}

type op struct {
	what  string // for the trace
	id    uint64
	at    time.Time
	actor string // whose: held while it is cut off
	lane  string
	do    func(now time.Time)
}

// Faults are the rates of one run's faults (swarm testing: each seed
// draws its own, some of them zero).
type Faults struct {
	Latency     time.Duration // each request and reply is late by up to this (uniform)
	Spike       float64       // the probability that one is late by SpikeDelay more
	SpikeDelay  time.Duration
	LoseRequest float64 // a request is never applied (its caller times out)
	LoseReply   float64 // a request is applied and its reply lost (an unknown outcome)
	DupReply    float64 // a reply is delivered twice
	Reorder     float64 // a reply overtakes the one before it in its lane
	ReaderStall float64 // a reader's next message is late by StallDelay (a consumer lost and replaced)
	StallDelay  time.Duration
	Instant     float64 // an operation is not late at all (a loopback's fastest path): stored the instant it was sent
	// StaleSnapshot is the probability that a snapshot stored keeps the
	// bytes of the one before it under its own headers (an object store
	// that served or kept stale data, or a tampered one): a coordinator
	// that restores it must find that its bytes do not hash to its anchor.
	StaleSnapshot float64
}

// NewNet returns the network of model m with faults f, its choices drawn
// from seed.
func NewNet(m *Model, f Faults, seed uint64) *Net {
	return &Net{model: m, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), lanes: map[string]*rand.Rand{}, faults: f,
		kick: make(chan struct{}, 1), cut: map[string]time.Time{}, held: map[string]time.Time{}, slow: map[string]time.Duration{}, Counts: map[string]int{}, Seen: map[string]int{}}
}

// Model returns the model (read it only between steps).
func (n *Net) Model() *Model { return n.model }

// Lock and Unlock guard the model for a reader outside the steps.
func (n *Net) Lock()   { n.mu.Lock() }
func (n *Net) Unlock() { n.mu.Unlock() }

// chance reports true with probability p (and counts kind when it does).
func (n *Net) chance(p float64, kind string) bool {
	if n.stopped || p <= 0 || n.rng.Float64() >= p {
		return false
	}
	n.Counts[kind]++
	return true
}

// laneChance is chance drawn from lane's generator.
func (n *Net) laneChance(lane string, p float64, kind string) bool {
	x := n.laneRand(lane).Float64()
	if n.stopped || p <= 0 || x >= p {
		return false
	}
	n.Counts[kind]++
	return true
}

func (n *Net) laneRand(lane string) *rand.Rand {
	r := n.lanes[lane]
	if r == nil {
		h := fnv.New64a()
		h.Write([]byte(lane))
		r = rand.New(rand.NewPCG(n.seed, h.Sum64()))
		n.lanes[lane] = r
	}
	return r
}

// delay is the delay of the next operation of lane, from the lane's own
// generator: goroutines that submit at the same instant of the bubble's
// clock may do so in any order, and each lane is submitted to by one.
func (n *Net) delay(lane string) time.Duration {
	r := n.laneRand(lane)
	latency, spike, instant := r.Int64N(int64(n.faults.Latency)+1), r.Float64(), r.Float64()
	if n.stopped {
		return 0
	}
	if n.faults.Instant > 0 && instant < n.faults.Instant {
		return 0
	}
	d := time.Duration(latency)
	if n.faults.Spike > 0 && spike < n.faults.Spike {
		n.Counts["spike"]++
		d += n.faults.SpikeDelay
	}
	return d
}

// submitLocked adds an operation of actor on lane, due after a delay.
func (n *Net) submitLocked(actor, lane string, extra time.Duration, do func(now time.Time)) {
	n.next++
	for prefix, d := range n.slow { // (a sum: the order does not matter)
		if strings.HasPrefix(lane, prefix) {
			extra += d
		}
	}
	n.ops = append(n.ops, &op{id: n.next, at: time.Now().Add(n.delay(lane) + extra), actor: actor, lane: lane, do: do})
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

func (n *Net) submit(actor, lane string, do func(now time.Time)) {
	n.submitWhat(actor, lane, "", do)
}

func (n *Net) submitWhat(actor, lane, what string, do func(now time.Time)) {
	n.mu.Lock()
	n.submitLocked(actor, lane, 0, do)
	n.ops[len(n.ops)-1].what = what
	n.mu.Unlock()
}

// Cut holds every operation of actor (its requests and the replies to it)
// until until: a network partition of the actor, or a process paused
// with its requests in flight.
func (n *Net) Cut(actor string, until time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped {
		return
	}
	n.Counts["cut"]++
	n.cut[actor] = until
}

// Hold holds every operation of one lane until until (the zero time:
// releases it now): a test's targeted fault, such as one coordinator's
// requests to the leadership bucket (lane "c1>kv") stuck while its other
// requests go through. Lanes are "<actor>><target>" for requests
// (targets: in, out, info, get, kv, obj), "<<target>><actor>" for
// replies and "~<actor>#<n>" for an actor's n-th reader.
func (n *Net) Hold(lane string, until time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if until.IsZero() {
		delete(n.held, lane)
	} else {
		n.Counts["hold"]++
		n.held[lane] = until
	}
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// Slow adds d to the delay of every operation submitted from now on to a
// lane that starts with prefix (0: no more): a test's targeted fault, such
// as a coordinator's readers ("~c1#") delivering slowly.
func (n *Net) Slow(prefix string, d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if d == 0 {
		delete(n.slow, prefix)
	} else {
		n.slow[prefix] = d
	}
}

// Stop injects no more faults from now on.
func (n *Net) Stop() {
	n.mu.Lock()
	n.stopped = true
	clear(n.cut)
	n.mu.Unlock()
}

// Touch counts a rare path reached (the simulator's coverage table).
func (n *Net) Touch(what string) {
	n.mu.Lock()
	n.Seen[what]++
	n.mu.Unlock()
}

// Appended registers fn, called (under the net's lock) for every append
// the decision stream stores: the actor, the first and last sequences.
func (n *Net) Appended(fn func(actor string, first, last uint64)) {
	n.mu.Lock()
	n.onAppend = append(n.onAppend, fn)
	n.mu.Unlock()
}

// eligible returns the operations that may be applied now: the first of
// each lane that is due and not held, and (Reorder) sometimes the second.
func (n *Net) eligible(now time.Time) []*op {
	first := map[string]int{} // lane -> index in n.ops of its first op
	second := map[string]int{}
	for i, o := range n.ops {
		if _, ok := first[o.lane]; !ok {
			first[o.lane] = i
		} else if _, ok := second[o.lane]; !ok {
			second[o.lane] = i
		}
	}
	var out []*op
	ok := func(o *op) bool {
		if o.at.After(now) {
			return false
		}
		if until, cut := n.cut[o.actor]; cut && now.Before(until) {
			return false
		}
		if until, held := n.held[o.lane]; held && now.Before(until) {
			return false
		}
		return true
	}
	// (lanes in order: the seed's generator is drawn from below)
	lanes := make([]string, 0, len(first))
	for lane := range first {
		lanes = append(lanes, lane)
	}
	slices.Sort(lanes)
	for _, lane := range lanes {
		i := first[lane]
		if o := n.ops[i]; ok(o) {
			out = append(out, o)
		} else {
			continue
		}
		if j, has := second[lane]; has && ok(n.ops[j]) && len(lane) > 0 && lane[0] == '<' && n.chance(n.faults.Reorder, "reorder") {
			out = append(out, n.ops[j])
		}
	}
	// A deterministic order to choose from: by lane, then age.
	slices.SortFunc(out, func(a, b *op) int {
		if c := cmp.Compare(a.lane, b.lane); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	return out
}

// Step applies one operation that is due, chosen by the seed, and reports
// whether there was one.
func (n *Net) Step() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := time.Now()
	for a, until := range n.cut {
		if !now.Before(until) {
			delete(n.cut, a)
		}
	}
	for l, until := range n.held {
		if !now.Before(until) {
			delete(n.held, l)
		}
	}
	el := n.eligible(now)
	if len(el) == 0 {
		return false
	}
	o := el[n.rng.IntN(len(el))]
	i := slices.Index(n.ops, o)
	n.ops = slices.Delete(n.ops, i, i+1)
	if n.Trace != nil {
		*n.Trace = append(*n.Trace, now.Format("05.000000000")+" "+o.lane+" "+o.what)
	}
	o.do(now)
	return true
}

// Wait blocks until an operation is due (the earliest one's time, or a
// cut's end), one is added, or ctx ends.
func (n *Net) Wait(ctx context.Context) {
	n.mu.Lock()
	var at time.Time
	heads := map[string]bool{}
	for _, o := range n.ops {
		if heads[o.lane] {
			continue // behind its lane's first: eligible only after it
		}
		heads[o.lane] = true
		t := o.at
		if until, cut := n.cut[o.actor]; cut && t.Before(until) {
			t = until
		}
		if until, held := n.held[o.lane]; held && t.Before(until) {
			t = until
		}
		if at.IsZero() || t.Before(at) {
			at = t
		}
	}
	n.mu.Unlock()
	var timer <-chan time.Time
	if !at.IsZero() {
		t := time.NewTimer(max(time.Until(at), 0))
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-timer:
	case <-n.kick:
	case <-ctx.Done():
	}
}

// Publishing is how many publishes to the input stream are in flight
// from actors other than those skip names: inputs not stored yet, which
// may still change the log once stored.
func (n *Net) Publishing(skip func(actor string) bool) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := 0
	for _, o := range n.ops {
		if strings.HasSuffix(o.lane, ">in") && (skip == nil || !skip(o.actor)) {
			c++
		}
	}
	return c
}

// Pending is how many operations are in flight.
func (n *Net) Pending() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.ops)
}
