package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/embedded"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/streams"
)

// Storm holds the figures of one expiry storm (scenario 7, Result.Storms):
// N leases that all fall due before a coordinator restarts, fired by its
// first ticks. In `tenure bench --json` each figure is the key
// storm_<label>_<json name>, label as StormLabel writes N (storm_100k_s,
// storm_1m_per_s, ...).
type Storm struct {
	Leases        float64 `json:"leases"`                  // N: the leases due at once
	Seconds       float64 `json:"s"`                       // from the restarted coordinator being live to the stored timestamp of the last expired decision
	PerS          float64 `json:"per_s"`                   // expiries stored per second: N / Seconds
	RawPerS       float64 `json:"raw_per_s"`               // the raw baseline: the better of RawAsyncPerS and RawBatchPerS
	Ratio         float64 `json:"ratio"`                   // PerS / RawPerS
	RawAsyncPerS  float64 `json:"raw_async_per_s"`         // raw: one publisher, asynchronous publishes, a large window
	RawBatchPerS  float64 `json:"raw_batch_per_s"`         // raw: one publisher, atomic batches of 1,000, two in flight
	FirstS        float64 `json:"first_s"`                 // from live to the first expired decision stored
	RestartS      float64 `json:"restart_s"`               // from starting the coordinator to it being live
	Expired       float64 `json:"expired"`                 // distinct jobs that expired exactly once
	OK            float64 `json:"ok"`                      // 1 when exactly N distinct jobs expired, each once, no input caused more than events.MaxDecisionsPerInput decisions, the coordinator kept its session (no leadership lost), and every honest renewal was renewed
	MaxDecisions  float64 `json:"max_decisions_per_input"` // the most decisions one input caused (Tenure-N's of)
	Ticks         float64 `json:"ticks"`                   // inputs whose decisions include expiries
	Cores         float64 `json:"cores"`                   // the process's CPU time over the storm, per wall-clock second
	GrantsPerS    float64 `json:"grants_per_s"`            // the setup: grants stored per second by the first coordinator (interval mode)
	PerAppend     float64 `json:"decisions_per_append"`    // the coordinator's appends during the storm: decisions per append (atomic batch or single) on average
	SteadyPerS    float64 `json:"steady_per_s"`            // expiries stored per second from the 10th to the 90th percentile of the storm (without its start and end)
	Sessions      float64 `json:"sessions"`                // the restarted coordinator's sessions during the storm: 1, unless its loop stopped and resynchronised from the streams
	RestartInputs float64 `json:"restart_inputs"`          // inputs the restarted coordinator folded after its snapshot
	SetupPauseMS  float64 `json:"setup_pause_ms"`          // the setup: the first coordinator's longest turn of its live loop (snapshots every 100,000 inputs of the growing projection included)
	PauseMS       float64 `json:"pause_ms"`                // the storm: the restarted coordinator's longest turn of its live loop
	// Honest workers renewing while the storm is decided (issue "A flood
	// costs only the flooder": fair service under the coordinator's own
	// backlog): stormHonestLeases of them from the coordinator being live
	// to the storm's end, one renewal each every 50 ms, the publish to
	// the verdict received.
	HonestRenewals float64 `json:"honest_renewals"`   // renewals answered
	HonestRefused  float64 `json:"honest_refused"`    // of them not renewed (0 on a run that is right)
	HonestP50MS    float64 `json:"honest_rtt_p50_ms"` //
	HonestP99MS    float64 `json:"honest_rtt_p99_ms"` //
	HonestMaxMS    float64 `json:"honest_rtt_max_ms"` //
}

// StormLabel names a storm of n leases in the JSON keys: "100k" for
// 100,000, "1m" for 1,000,000, "2500" for 2,500.
func StormLabel(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return itoa(n/1_000_000) + "m"
	case n >= 1000 && n%1000 == 0:
		return itoa(n/1000) + "k"
	}
	return itoa(n)
}

// figures appends s's JSON keys and values to b, each after a comma.
func (s Storm) appendJSON(b []byte) []byte {
	v, t := reflect.ValueOf(s), reflect.TypeOf(s)
	prefix := "storm_" + StormLabel(int(s.Leases)) + "_"
	for i := range t.NumField() {
		f := v.Field(i).Float()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			f = 0
		}
		b = append(b, `,"`...)
		b = append(b, prefix...)
		b = append(b, t.Field(i).Tag.Get("json")...)
		b = append(b, `":`...)
		b = strconv.AppendFloat(b, f, 'f', -1, 64)
	}
	return b
}

// MarshalJSON writes r as one flat JSON object: its fields, then each
// storm's figures under their storm_<label>_ keys.
//
// The queue scenario's hostile runs likewise: queue_hostile_<mode>_per_s
// and queue_hostile_<mode>_ratio (the mode's dashes as underscores).
func (r Result) MarshalJSON() ([]byte, error) {
	type plain Result // r's fields, without this method
	b, err := json.Marshal(plain(r))
	if err != nil || len(r.Storms) == 0 && len(r.QueueHostile) == 0 {
		return b, err
	}
	b = b[:len(b)-1] // the closing brace
	for _, s := range r.Storms {
		b = s.appendJSON(b)
	}
	for _, h := range r.QueueHostile {
		k := "queue_hostile_" + strings.ReplaceAll(h.Mode, "-", "_")
		b = fmt.Appendf(b, `,%q:%s,%q:%s`, k+"_per_s", strconv.FormatFloat(h.PerS, 'g', -1, 64), k+"_ratio", strconv.FormatFloat(h.Ratio, 'g', -1, 64))
	}
	return append(b, '}'), nil
}

// stormPace is the rate of the target: 1,000,000 expiries stored
// in 30 s with sync always.
const stormPace = 1_000_000.0 / 30

// storm is scenario 7 (issue "Nothing bricks a deployment"), once per size
// of StormSizes.
func (b *runner) storm(ctx context.Context) error {
	for _, n := range b.cfg.StormSizes {
		s, err := b.stormOf(ctx, n)
		if err != nil {
			return fmt.Errorf("%d leases: %w", n, err)
		}
		b.res.Storms = append(b.res.Storms, s)
	}
	return nil
}

// stormOf is one storm of n leases:
//
//  1. On a server in interval mode (setup only, like the large log), a live
//     coordinator grants a probe of one-hour leases, which tells its grant
//     rate, then n leases (jobs storm-0 ... storm-<n-1>, one acquire each,
//     published asynchronously) whose durations all end at one instant T,
//     chosen from the probe's rate with a margin (three times the time the
//     rate predicts, plus 2 s) so that every grant is stored, and the
//     coordinator stopped, before T. That nothing expired during the setup
//     is checked, not assumed; a setup that comes within stormGuard of T
//     gives up and is tried once more, predicting from the rate it
//     achieved.
//  2. The server is restarted in the run's sync mode on the same
//     directory, and the scenario waits until the latest expires_at of the
//     stored grants has passed.
//  3. A coordinator starts; every lease is due at its first tick. Measured:
//     start to live, and live to the stored timestamp of the last expired
//     decision. Then the decision stream is read (headers only) to count
//     the jobs that expired and the decisions per input.
//  4. The raw baseline (stormRaw).
func (b *runner) stormOf(ctx context.Context, n int) (Storm, error) {
	label := StormLabel(n)
	s := Storm{Leases: float64(n)}
	var dir string
	var lastExpiry time.Time
	var base uint64
	var err error
	// A second attempt, if the first could not grant every lease before T
	// (the machine slowed down), predicts from the rate the first achieved.
	var slowest float64
	for attempt := 1; ; attempt++ {
		dir = b.newDir("storm-" + label)
		lastExpiry, base, err = b.stormSetup(ctx, dir, n, slowest, &s)
		var late *stormLateError
		if attempt == 1 && errors.As(err, &late) {
			b.logf("  %v: again, with the rate it achieved", err)
			slowest = late.rate
			continue
		}
		if err != nil {
			return s, fmt.Errorf("setup: %w", err)
		}
		break
	}
	// A log a coordinator restarts on has long been on disk (largeLog).
	syscall.Sync()
	srv, err := b.startServer(dir, false)
	if err != nil {
		return s, err
	}
	defer srv.Shutdown()
	select {
	case <-time.After(time.Until(lastExpiry.Add(10 * time.Millisecond))):
	case <-ctx.Done():
		return s, ctx.Err()
	}
	body, err := b.stormRun(ctx, srv, n, base, &s, label)
	if err != nil {
		return s, err
	}
	srv.Shutdown()
	syscall.Sync()
	if err := b.stormRaw(ctx, n, body, &s); err != nil {
		return s, fmt.Errorf("raw baseline: %w", err)
	}
	s.RawPerS = max(s.RawAsyncPerS, s.RawBatchPerS)
	s.Ratio = ratio(s.PerS, s.RawPerS)
	b.logf("  storm of %d: %.0f expiries/s against raw %.0f/s: ratio %.2f", n, s.PerS, s.RawPerS, s.Ratio)
	return s, nil
}

// stormLateError says that the setup could not grant every lease and stop
// its coordinator before the leases' common expiry T.
type stormLateError struct {
	granted, n int
	rate       float64 // grants stored per second meanwhile
	predicted  time.Duration
}

func (e *stormLateError) Error() string {
	return fmt.Sprintf("%d of %d leases granted, at %.0f/s, when T came near (the probe predicted %.1f s for all)", e.granted, e.n, e.rate, e.predicted.Seconds())
}

// stormGuard is how long before T the setup must have stopped its
// coordinator.
const stormGuard = 500 * time.Millisecond

// stormWindow is how many acquires the setup keeps stored and not yet
// granted.
const stormWindow = 16384

// stormSetup is step 1 of stormOf. It returns the latest expires_at of the
// stored grants and the decision stream's last sequence after them. With
// rate > 0 it predicts the time to grant n leases from the slower of rate
// and the probe's.
func (b *runner) stormSetup(ctx context.Context, dir string, n int, rate float64, s *Storm) (time.Time, uint64, error) {
	srv, err := b.startServer(dir, true)
	if err != nil {
		return time.Time{}, 0, err
	}
	defer srv.Shutdown()
	co, err := b.startCoordinator(srv, nil)
	if err != nil {
		return time.Time{}, 0, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = co.stop()
		}
	}()
	if err := co.waitLive(30 * time.Second); err != nil {
		return time.Time{}, 0, err
	}
	nc, err := connect(srv.ClientURL(), "bench-storm-workers")
	if err != nil {
		return time.Time{}, 0, err
	}
	defer nc.Close()
	var pubErr atomic.Value
	js, err := asyncJS(nc, 8192, &pubErr)
	if err != nil {
		return time.Time{}, 0, err
	}
	top := streams.Topology{}
	// acquire publishes count acquires of jobs prefix-0 ... and waits until
	// every grant is stored; past deadline (if set) it gives up with
	// errStormLate.
	var first uint64 // the input sequence of the first acquire
	errStormLate := errors.New("late")
	acquire := func(prefix string, count int, leaseMS func() int64, deadline time.Time) error {
		var err error
		if first, err = lastSeq(ctx, js, top.InputStream()); err != nil {
			return err
		}
		first++
		late := func() bool { return !deadline.IsZero() && time.Now().After(deadline) }
		var body []byte
		for i := range count {
			subj := events.InputSubject(events.RoleWorker, "w"+itoa(i%16), prefix+itoa(i), events.VerbAcquire)
			body = strconv.AppendInt(append(body[:0], `{"v":1,"lease_ms":`...), leaseMS(), 10)
			body = append(body, '}')
			if _, err := js.PublishMsgAsync(&nats.Msg{Subject: subj, Data: append([]byte(nil), body...)}, jetstream.WithStallWait(time.Minute)); err != nil {
				return err
			}
			if i%1024 != 0 {
				continue
			}
			if late() {
				return errStormLate
			}
			// At most stormWindow acquires stored and not yet folded, as
			// workers waiting for their grants would keep: a flood far
			// ahead of the fold would also leave the coordinator's
			// checkpoints, and so its snapshots, far behind.
			for uint64(i+1) > co.c.Stats().InputsFolded-min(co.c.Stats().InputsFolded, first-1)+stormWindow {
				if late() {
					return errStormLate
				}
				select {
				case err := <-co.done:
					stopped = true
					return fmt.Errorf("coordinator stopped: %v", err)
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(time.Millisecond):
				}
			}
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(10 * time.Minute):
			return fmt.Errorf("acquires not acknowledged: %w", errTimeout)
		case <-ctx.Done():
			return ctx.Err()
		}
		if e, ok := pubErr.Load().(error); ok {
			return fmt.Errorf("acquire: %w", e)
		}
		last, err := lastSeq(ctx, js, top.InputStream())
		if err != nil {
			return err
		}
		for co.c.Stats().InputsFolded < last {
			if late() {
				return errStormLate
			}
			select {
			case err := <-co.done:
				stopped = true
				return fmt.Errorf("coordinator stopped: %v", err)
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Millisecond):
			}
		}
		return nil
	}

	// The probe: its leases last an hour, and take no part in the storm.
	probe := min(max(n/20, 500), 20_000)
	t0 := time.Now()
	if err := acquire("probe-", probe, func() int64 { return time.Hour.Milliseconds() }, time.Time{}); err != nil {
		return time.Time{}, 0, fmt.Errorf("probe: %w", err)
	}
	probeRate := float64(probe) / time.Since(t0).Seconds()
	if rate > 0 {
		rate = min(rate, probeRate)
	} else {
		rate = probeRate
	}
	// The rate falls as the projection and the streams grow (a first
	// probe ran twice as fast as the 100,000 grants after it).
	predicted := time.Duration(float64(n) / rate * float64(time.Second))
	at := time.Now().Add(3*predicted + 2*time.Second)
	b.logf("  storm of %d: probe of %d grants at %.0f/s; every lease to expire at T = now + %.1f s", n, probe, probeRate, time.Until(at).Seconds())

	t1 := time.Now()
	err = acquire("storm-", n, func() int64 {
		// Rounded up: expires_at = the acquire's stored time + lease_ms >= T.
		return int64(time.Until(at)+time.Millisecond-1) / int64(time.Millisecond)
	}, at.Add(-stormGuard))
	built := time.Since(t1)
	if errors.Is(err, errStormLate) {
		granted := int(co.c.Stats().InputsFolded - min(co.c.Stats().InputsFolded, first-1))
		return time.Time{}, 0, &stormLateError{granted: granted, n: n, rate: float64(granted) / built.Seconds(), predicted: predicted}
	}
	if err != nil {
		return time.Time{}, 0, fmt.Errorf("storm leases: %w", err)
	}
	s.GrantsPerS = float64(n) / built.Seconds()
	// A coordinator restarts from its latest snapshot: wait until one
	// within DefaultSnapshotEvery inputs of the end is stored (what a
	// deployment that took its leases over hours would have), while T
	// allows.
	end := co.c.Stats().InputsFolded
	for co.c.Stats().SnapshotSeq+coordinator.DefaultSnapshotEvery < end && time.Until(at) > stormGuard+time.Second {
		select {
		case <-ctx.Done():
			return time.Time{}, 0, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	snap := co.c.Stats().SnapshotSeq
	s.SetupPauseMS = float64(co.m.takePause()) / 1e6
	stopped = true
	if err := co.stop(); err != nil {
		return time.Time{}, 0, err
	}
	b.logf("  %d leases granted in %.1f s (%.0f/s); latest snapshot: input %d of %d; the loop's longest turn %.1f ms; coordinator stopped %.1f s before T",
		n, built.Seconds(), s.GrantsPerS, snap, end, s.SetupPauseMS, time.Until(at).Seconds())

	// Read every stored decision back: n grants of storm leases, and not
	// one expiry (the margin held).
	last, err := lastSeq(ctx, js, top.DecisionStream())
	if err != nil {
		return time.Time{}, 0, err
	}
	var grants int
	var latest int64
	var bad error
	err = readDecisions(ctx, js, top.DecisionStream(), 1, last, false, func(m jetstream.Msg, _ *jetstream.MsgMetadata) {
		job, kind := decisionJobKind(m.Subject())
		switch {
		case bad != nil:
		case kind == events.KindExpired.String():
			bad = fmt.Errorf("%s expired during the setup", job)
		case kind == events.KindGranted.String() && strings.HasPrefix(job, "storm-"):
			d, err := events.DecodeDecision(m.Data())
			if err != nil {
				bad = err
				return
			}
			grants++
			latest = max(latest, d.Job.ExpiresAt)
		}
	})
	if err == nil {
		err = bad
	}
	if err != nil {
		return time.Time{}, 0, err
	}
	if grants != n {
		return time.Time{}, 0, fmt.Errorf("%d storm leases granted, want %d", grants, n)
	}
	return time.Unix(0, latest), last, nil
}

// stormRun is step 3 of stormOf, on the restarted server: a coordinator
// restarts, fires the n due leases; the decisions after base are read
// back. It returns the body of the first expired decision (the raw
// baseline stores messages of its size).
func (b *runner) stormRun(ctx context.Context, srv *embedded.Server, n int, base uint64, s *Storm, label string) ([]byte, error) {
	t0 := time.Now()
	co, err := b.startCoordinator(srv, nil)
	if err != nil {
		return nil, err
	}
	// Its appends are counted from its start (a restart appends nothing
	// before it goes live): on two loaded cores T passed during the
	// restart, every expiry was stored before the honest workers were
	// connected, and counted from then the storm made 0 decisions in 0
	// appends.
	co.m.take()
	if err := co.waitLive(10 * time.Minute); err != nil {
		_ = co.stop()
		return nil, err
	}
	live := time.Now()
	s.RestartInputs = float64(co.c.Stats().InputsFolded - co.c.Stats().SnapshotSeq)
	hnc, err := connect(srv.ClientURL(), "bench-storm-honest")
	if err != nil {
		_ = co.stop()
		return nil, err
	}
	defer hnc.Close()
	hjs, err := jetstream.New(hnc)
	if err != nil {
		_ = co.stop()
		return nil, err
	}
	honest, err := startHonest(ctx, hnc, hjs)
	if err != nil {
		_ = co.stop()
		return nil, err
	}
	defer honest.cancel()
	stopProfile, stopTrace := b.profile("storm-"+label), b.trace("storm-"+label)
	stop := func() { stopTrace(); stopProfile() }
	c0 := cpuTime()
	s.RestartS = live.Sub(t0).Seconds()
	// The fewest decisions the storm can take: n expiries, and the ticked
	// verdict of each tick that fired MaxFiredPerInput of them. A storm
	// slower than 10,000 expiries/s (after a minute) is cut short and
	// reported as it stands: its figures then say how far it got.
	want := base + uint64(n) + uint64((n+events.MaxFiredPerInput-1)/events.MaxFiredPerInput)
	deadline := live.Add(time.Duration(n)*100*time.Microsecond + time.Minute)
	complete := true
	// (each honest renewal stored has exactly one decision too)
	for co.c.Stats().DecisionsStored < want+uint64(honest.storedCount()) {
		select {
		case err := <-co.done:
			stop()
			co.done <- err // for co.stop
			_ = co.stop()
			return nil, fmt.Errorf("coordinator stopped: %v", err)
		case <-ctx.Done():
			stop()
			_ = co.stop()
			return nil, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			complete = false
			break
		}
	}
	cut := time.Since(live)
	s.Cores = (cpuTime() - c0).Seconds() / cut.Seconds()
	stop()
	if err := honest.stop(s); err != nil {
		_ = co.stop()
		return nil, err
	}
	decisions, appends, lat, _ := co.m.take()
	s.PauseMS = float64(co.m.takePause()) / 1e6
	st := co.c.Stats()
	s.Sessions = float64(st.Sessions)
	if err := co.stop(); err != nil {
		return nil, err
	}
	if !complete {
		b.logf("  storm cut short %.0f s after live: %d decisions of at least %d stored, the coordinator's session %d",
			cut.Seconds(), st.DecisionsStored-base, want-base, st.Sessions)
	}
	s.PerAppend = ratio(float64(decisions), float64(appends))

	// Read the storm back, headers only (the subject names the job and
	// the kind; Tenure-N the count).
	nc, err := connect(srv.ClientURL(), "bench-storm-reader")
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	top := streams.Topology{}
	times := make([]uint8, n)
	var expired, others int
	var first, lastAt, at10, at50, at90 time.Time
	var firstSeq uint64
	var maxOf uint32
	causes := map[string]bool{}
	var bad error
	read := func(m jetstream.Msg, meta *jetstream.MsgMetadata) {
		if bad != nil {
			return
		}
		_, of, ok := strings.Cut(m.Headers().Get(events.HeaderIndex), "/")
		k, err := strconv.ParseUint(of, 10, 32)
		if !ok || err != nil {
			bad = fmt.Errorf("decision on %s: header %s %q", m.Subject(), events.HeaderIndex, m.Headers().Get(events.HeaderIndex))
			return
		}
		maxOf = max(maxOf, uint32(k))
		job, kind := decisionJobKind(m.Subject())
		if kind != events.KindExpired.String() {
			return
		}
		i, err := strconv.Atoi(strings.TrimPrefix(job, "storm-"))
		if !strings.HasPrefix(job, "storm-") || err != nil || i < 0 || i >= n {
			others++
			return
		}
		expired++
		if times[i] < 255 {
			times[i]++
		}
		if first.IsZero() {
			first, firstSeq = meta.Timestamp, meta.Sequence.Stream
		}
		lastAt = meta.Timestamp
		if expired == max(n/10, 1) {
			at10 = lastAt
		}
		if expired == n/2 {
			at50 = lastAt
		}
		if expired == n-n/10 {
			at90 = lastAt
		}
		causes[m.Headers().Get(events.HeaderCause)] = true
	}
	// Every decision of the storm (the coordinator is stopped).
	last, err := lastSeq(ctx, js, top.DecisionStream())
	if err != nil {
		return nil, err
	}
	if err := readDecisions(ctx, js, top.DecisionStream(), base+1, last, true, read); err != nil {
		return nil, err
	}
	if bad != nil {
		return nil, bad
	}
	once := 0
	for _, c := range times {
		if c == 1 {
			once++
		}
	}
	if first.IsZero() {
		return nil, fmt.Errorf("no lease expired")
	}
	s.Expired = float64(once)
	s.MaxDecisions = float64(maxOf)
	s.Ticks = float64(len(causes))
	s.FirstS = first.Sub(live).Seconds()
	if complete {
		s.Seconds = lastAt.Sub(live).Seconds()
		s.PerS = ratio(float64(n), s.Seconds)
		if n >= 10 {
			s.SteadyPerS = ratio(float64(n-n/10-max(n/10, 1)), at90.Sub(at10).Seconds())
		}
		if once == n && expired == n && others == 0 && maxOf <= events.MaxDecisionsPerInput && s.Sessions == 1 && s.HonestRefused == 0 {
			s.OK = 1
		}
	} else {
		// The time it was given, and the rate of what it stored.
		s.Seconds = cut.Seconds()
		s.PerS = ratio(float64(expired), s.Seconds)
	}
	b.logf("  restart to live %.2f s; %d expiries stored %.2f s after live (the first after %.1f ms): %.0f/s, %.2f cores busy",
		s.RestartS, expired, s.Seconds, s.FirstS*1000, s.PerS, s.Cores)
	if complete {
		b.logf("    10%%, 50%%, 90%% of the expiries stored after %.2f, %.2f, %.2f s: %.0f/s from 10%% to 90%%",
			at10.Sub(live).Seconds(), at50.Sub(live).Seconds(), at90.Sub(live).Seconds(), s.SteadyPerS)
	}
	b.logf("    coordinator: %d decisions in %d appends (%.0f per append on average, %v each); %d sessions; restarted from a snapshot %d inputs before the end",
		decisions, appends, s.PerAppend, lat.Round(10*time.Microsecond), st.Sessions, int(s.RestartInputs))
	b.logf("  %d of %d jobs expired exactly once (%d expiries in all, %d of other jobs) by %d inputs; at most %d decisions per input (limit %d)",
		once, n, expired, others, len(causes), maxOf, events.MaxDecisionsPerInput)
	b.logf("  %d honest renewals meanwhile (%d not renewed): publish to verdict p50 %.1f ms, p99 %.1f ms, max %.1f ms",
		int(s.HonestRenewals), int(s.HonestRefused), s.HonestP50MS, s.HonestP99MS, s.HonestMaxMS)
	out, err := js.Stream(ctx, top.DecisionStream())
	if err != nil {
		return nil, err
	}
	msg, err := out.GetMsg(ctx, firstSeq)
	if err != nil {
		return nil, err
	}
	return msg.Data, nil
}

// stormRaw is step 4 of stormOf: raw JetStream stores messages of the size
// of an expired decision (body, as stored by the storm; subjects of the
// same shape, one per job; no headers but the batch protocol's) into a
// fresh stream with the decision stream's configuration, on a fresh server
// in the run's sync mode, as fast as it takes them from one publisher, in
// two ways: asynchronous publishes with 16,384 unacknowledged (what a raw
// user does in interval mode), and atomic batches of 1,000, two in flight
// (what a raw user does with sync always, where each message alone is one
// fsync). Each way stores n messages, or what it stores in
// StormRawWindow.
func (b *runner) stormRaw(ctx context.Context, n int, body []byte, s *Storm) error {
	name := "storm-" + StormLabel(n)
	subject := func(i int) string { return "raw.out.w" + itoa(i%16) + ".storm-" + itoa(i) + ".expired" }
	setup := func(name string) (*embedded.Server, *nats.Conn, error) {
		srv, err := b.startServer(b.newDir("storm-raw-"+name), false)
		if err != nil {
			return nil, nil, err
		}
		nc, err := connect(srv.ClientURL(), "bench-storm-raw")
		if err != nil {
			srv.Shutdown()
			return nil, nil, err
		}
		js, err := jetstream.New(nc)
		if err == nil {
			cfg := streams.Topology{Prefix: "RAW"}.DecisionConfig()
			cfg.Subjects = []string{"raw.out.>"}
			cfg.Description = "tenure bench baseline"
			_, err = js.CreateStream(ctx, cfg)
		}
		if err != nil {
			nc.Close()
			srv.Shutdown()
			return nil, nil, err
		}
		return srv, nc, nil
	}

	// Asynchronous publishes.
	srv, nc, err := setup("async")
	if err != nil {
		return err
	}
	var pubErr atomic.Value
	js, err := asyncJS(nc, 16384, &pubErr)
	if err != nil {
		nc.Close()
		srv.Shutdown()
		return err
	}
	stopProfile, stopTrace := b.profile(name+"-raw-async"), b.trace(name+"-raw-async")
	t0 := time.Now()
	sent := 0
	for ; sent < n && (sent%1024 != 0 || time.Since(t0) < b.cfg.StormRawWindow); sent++ {
		if _, err = js.PublishMsgAsync(&nats.Msg{Subject: subject(sent), Data: body}, jetstream.WithStallWait(time.Minute)); err != nil {
			break
		}
	}
	if err == nil {
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(5 * time.Minute):
			err = fmt.Errorf("async publishes not acknowledged: %w", errTimeout)
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	if e, ok := pubErr.Load().(error); ok && err == nil {
		err = e
	}
	s.RawAsyncPerS = float64(sent) / time.Since(t0).Seconds()
	stopTrace()
	stopProfile()
	nc.Close()
	srv.Shutdown()
	if err != nil {
		return fmt.Errorf("async: %w", err)
	}
	b.logf("  raw JetStream, %d-byte messages from one publisher: %d async publishes (16,384 pending) at %.0f/s", len(body), sent, s.RawAsyncPerS)
	syscall.Sync()

	// Atomic batches.
	srv, nc, err = setup("batch")
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	defer nc.Close()
	stopProfile, stopTrace = b.profile(name+"-raw-batch"), b.trace(name+"-raw-batch")
	stored, rate, err := rawBatches(ctx, nc, n, body, subject, b.cfg.StormRawWindow)
	stopTrace()
	stopProfile()
	if err != nil {
		return fmt.Errorf("atomic batches: %w", err)
	}
	s.RawBatchPerS = rate
	b.logf("  raw JetStream, the same in atomic batches of %d (2 in flight): %d at %.0f/s", rawBatchSize, stored, rate)
	return nil
}

// rawBatchSize is the raw baseline's atomic batch: nats-server's largest.
const rawBatchSize = 1000

// rawBatches publishes up to n messages (until window has passed) in atomic
// batches of rawBatchSize, two awaiting their commit's reply at a time,
// and returns how many were stored and at what rate.
func rawBatches(ctx context.Context, nc *nats.Conn, n int, body []byte, subject func(int) string, window time.Duration) (int, float64, error) {
	var tag [8]byte
	_, _ = rand.Read(tag[:]) // never fails (crypto/rand)
	inbox := nats.NewInbox()
	replies := make(chan *nats.Msg, 16)
	sub, err := nc.ChanSubscribe(inbox, replies)
	if err != nil {
		return 0, 0, err
	}
	defer sub.Unsubscribe()
	wait := func() error {
		select {
		case m := <-replies:
			var r struct {
				Count uint64              `json:"count"`
				Error *jetstream.APIError `json:"error"`
			}
			if err := json.Unmarshal(m.Data, &r); err != nil {
				return fmt.Errorf("commit reply %q: %w", m.Data, err)
			}
			if r.Error != nil {
				return r.Error
			}
			if r.Count != rawBatchSize && r.Count != uint64(n%rawBatchSize) {
				return fmt.Errorf("commit reply %q: not a batch's", m.Data)
			}
			return nil
		case <-time.After(30 * time.Second):
			return fmt.Errorf("no commit reply: %w", errTimeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	t0 := time.Now()
	inFlight, sent := 0, 0
	h := nats.Header{}
	for sent < n && (sent == 0 || time.Since(t0) < window) {
		if inFlight == 2 {
			if err := wait(); err != nil {
				return 0, 0, err
			}
			inFlight--
		}
		id := "raw-" + hex.EncodeToString(tag[:]) + "-" + itoa(sent)
		k := min(rawBatchSize, n-sent)
		for j := range k {
			clear(h)
			h.Set("Nats-Batch-Id", id)
			h.Set("Nats-Batch-Sequence", itoa(j+1))
			msg := &nats.Msg{Subject: subject(sent + j), Data: body, Header: h}
			if j == k-1 {
				h.Set("Nats-Batch-Commit", "1")
				msg.Reply = inbox
			}
			if err := nc.PublishMsg(msg); err != nil {
				return 0, 0, err
			}
		}
		sent += k
		inFlight++
	}
	for ; inFlight > 0; inFlight-- {
		if err := wait(); err != nil {
			return 0, 0, err
		}
	}
	return sent, float64(sent) / time.Since(t0).Seconds(), nil
}

// readDecisions reads stream from sequence from to last through an ordered
// consumer (headers only, if asked), calling fn for each message.
func readDecisions(ctx context.Context, js jetstream.JetStream, stream string, from, last uint64, headersOnly bool, fn func(jetstream.Msg, *jetstream.MsgMetadata)) error {
	if last < from {
		return nil
	}
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from, HeadersOnly: headersOnly,
	})
	if err != nil {
		return err
	}
	done := make(chan struct{})
	var stopErr atomic.Value
	cc, err := cons.Consume(func(m jetstream.Msg) {
		meta, err := m.Metadata()
		if err != nil {
			stopErr.CompareAndSwap(nil, err)
			return
		}
		seq := meta.Sequence.Stream
		if seq > last {
			return
		}
		fn(m, meta)
		if seq == last {
			close(done)
		}
	}, jetstream.PullMaxMessages(4096))
	if err != nil {
		return err
	}
	defer cc.Stop()
	timeout := time.Duration(last-from+1)*100*time.Microsecond + time.Minute
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(timeout):
		return fmt.Errorf("read %s from %d to %d: %w", stream, from, last, errTimeout)
	}
	if e, ok := stopErr.Load().(error); ok {
		return e
	}
	return nil
}

// decisionJobKind returns the job and kind tokens of a decision subject,
// tenure.out.<addressee>.<job>.<kind>.
func decisionJobKind(subject string) (job, kind string) {
	i := strings.LastIndexByte(subject, '.')
	if i < 0 {
		return "", ""
	}
	kind = subject[i+1:]
	j := strings.LastIndexByte(subject[:i], '.')
	return subject[j+1 : i], kind
}

// stormHonestLeases is how many honest workers renew a lease each while a
// storm is decided: the probe's first leases (jobs probe-0 ... of workers
// w0 ..., one hour long: they take no part in the storm).
const stormHonestLeases = 4

// stormHonestEvery is how often each of them renews.
const stormHonestEvery = 50 * time.Millisecond

// honestRenewals renews leases one renewal at a time each, every
// stormHonestEvery, measuring each round trip: the publish (raw, as a
// bare client does) to its verdict received on a core subscription.
type honestRenewals struct {
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	mu        sync.Mutex
	lat       []time.Duration
	refused   int   // verdicts other than renewed
	published int   // renewals stored
	err       error // the first failure to publish or to get a verdict
}

// startHonest starts the renewers of the probe's first stormHonestLeases
// leases, whose grants the decision stream holds.
func startHonest(ctx context.Context, nc *nats.Conn, js jetstream.JetStream) (*honestRenewals, error) {
	out, err := js.Stream(ctx, streams.Topology{}.DecisionStream())
	if err != nil {
		return nil, err
	}
	hctx, cancel := context.WithCancel(ctx)
	h := &honestRenewals{cancel: cancel}
	for k := range stormHonestLeases {
		w, job := "w"+itoa(k), "probe-"+itoa(k)
		m, err := out.GetLastMsgForSubject(ctx, events.DecisionPrefix+"."+w+"."+job+"."+events.KindGranted.String())
		if err != nil {
			cancel()
			h.wg.Wait()
			return nil, fmt.Errorf("the grant of %s: %w", job, err)
		}
		d, err := events.DecodeDecision(m.Data)
		if err != nil {
			cancel()
			h.wg.Wait()
			return nil, err
		}
		sub, err := nc.SubscribeSync(events.DecisionPrefix + "." + w + "." + job + ".>")
		if err != nil {
			cancel()
			h.wg.Wait()
			return nil, err
		}
		subject := events.InputSubject(events.RoleWorker, w, job, events.VerbRenew)
		h.wg.Go(func() {
			defer sub.Unsubscribe()
			t := time.NewTicker(stormHonestEvery)
			defer t.Stop()
			for seq := uint64(1); ; seq++ {
				select {
				case <-hctx.Done():
					return
				case <-t.C:
				}
				body := fmt.Sprintf(`{"v":1,"lease_id":%q,"generation":%d,"renew_seq":%d}`, d.Job.LeaseID, d.Job.Generation, seq)
				t0 := time.Now()
				if _, err := js.Publish(hctx, subject, []byte(body)); err != nil {
					h.fail(hctx, err)
					return
				}
				h.mu.Lock()
				h.published++
				h.mu.Unlock()
				m, err := sub.NextMsgWithContext(hctx)
				if err != nil {
					h.fail(hctx, fmt.Errorf("no verdict: %w", err))
					return
				}
				lat := time.Since(t0)
				v, err := events.DecodeDecision(m.Data)
				h.mu.Lock()
				h.lat = append(h.lat, lat)
				if err != nil || v.Kind != events.KindRenewed {
					h.refused++
				}
				h.mu.Unlock()
			}
		})
	}
	return h, nil
}

func (h *honestRenewals) fail(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return // stopped
	}
	h.mu.Lock()
	if h.err == nil {
		h.err = err
	}
	h.mu.Unlock()
}

// storedCount is the renewals stored so far.
func (h *honestRenewals) storedCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.published
}

// stop stops the renewers and puts their figures in s.
func (h *honestRenewals) stop(s *Storm) error {
	h.cancel()
	h.wg.Wait()
	if h.err != nil {
		return fmt.Errorf("honest renewals: %w", h.err)
	}
	if len(h.lat) == 0 {
		return errors.New("honest renewals: no verdict measured")
	}
	s.HonestRenewals = float64(len(h.lat))
	s.HonestRefused = float64(h.refused)
	s.HonestP50MS = float64(percentile(h.lat, 50)) / 1e6
	s.HonestP99MS = float64(percentile(h.lat, 99)) / 1e6
	s.HonestMaxMS = float64(percentile(h.lat, 100)) / 1e6
	return nil
}
