package sim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/chaos"
	"github.com/maknow/tenure/internal/jsmodel"
)

// LostPlan is a run's crashes of the server's machine, each losing the
// streams' unsynced tails (a file store with a sync interval: Tenure's
// --sync interval, TESTING.md "The simulator").
type LostPlan struct {
	Rate float64       // per second of the fault phase, the chance of a crash (0: none)
	Sync time.Duration // the sync interval: each stream synced last up to this long before a crash
	// Together: both streams synced at one instant (then every decision
	// of an input lost is lost with it); otherwise each on its own timer,
	// as nats-server's file store does.
	Together bool
}

// LostTails turns the crashes that lose unsynced tails on in the swarm:
// on by default (one seed in five draws them), off with SIM_LOST=0 (or
// the test's -lost=false flag).
var LostTails = os.Getenv("SIM_LOST") != "0"

// drawLost draws seed's LostPlan (none with LostTails off).
func drawLost(seed uint64) LostPlan {
	if !LostTails {
		return LostPlan{}
	}
	return lostPlanOf(seed)
}

// lostPlanOf draws seed's LostPlan from a generator of its own, so that
// the rest of a seed's plan is what it was before the fault existed.
func lostPlanOf(seed uint64) LostPlan {
	r := rand.New(rand.NewPCG(seed, 0x1057))
	if r.Float64() >= 0.2 {
		return LostPlan{}
	}
	return LostPlan{Rate: 0.03 + 0.2*r.Float64(), Sync: time.Duration(20+r.IntN(1500)) * time.Millisecond, Together: r.IntN(2) == 0}
}

func (l LostPlan) String() string {
	if l.Rate == 0 {
		return "none"
	}
	return fmt.Sprintf("%.2f/s, sync every %v, together %v", l.Rate, l.Sync, l.Together)
}

// lostTails injects a run's crashes and judges what follows them.
type lostTails struct {
	p   LostPlan
	net *jsmodel.Net
	rng *rand.Rand

	mu      sync.Mutex
	crashes []crashed
	appends []appended
	// broken (judged at the end: classify): a crash lost inputs whose
	// verdicts the decision stream holds, kept through the crash or
	// appended after it by a coordinator that had read them before; no
	// fold of the input stream gives the decision stream any more (the
	// server's loss: a coordinator must refuse the log).
	broken   bool
	brokenAt time.Time
	// brokenFor: the log was broken for a while only: a crash lost inputs
	// whose verdicts the decision stream held, and a later crash lost those
	// verdicts too (classify). A coordinator that refused the log meanwhile
	// was right to; the final log folds, and every other oracle applies.
	brokenFor bool
}

type appended struct {
	actor       string
	first, last uint64
	at          time.Time
}

type crashed struct {
	at      time.Time
	in, out []jsmodel.Msg
}

func newLostTails(p Plan, net *jsmodel.Net) *lostTails {
	lt := &lostTails{p: p.Lost, net: net, rng: rand.New(rand.NewPCG(p.Seed, 0x1058))}
	net.Appended(func(actor string, first, last uint64) {
		// (under the net's lock)
		lt.mu.Lock()
		if len(lt.crashes) > 0 {
			lt.appends = append(lt.appends, appended{actor, first, last, time.Now()})
		}
		lt.mu.Unlock()
	})
	return lt
}

// tick is called every 100 ms of the fault phase: a crash, sometimes.
func (lt *lostTails) tick() {
	if lt.p.Rate == 0 || lt.rng.Float64() >= lt.p.Rate/10 {
		return
	}
	now := time.Now()
	inSynced := now.Add(-time.Duration(lt.rng.Int64N(int64(lt.p.Sync) + 1)))
	outSynced := inSynced
	if !lt.p.Together {
		outSynced = now.Add(-time.Duration(lt.rng.Int64N(int64(lt.p.Sync) + 1)))
	}
	in, out := lt.net.LoseTails(inSynced, outSynced)
	lt.net.Touch("server crashed, unsynced tails lost")
	if len(in) > 0 {
		lt.net.Touch("inputs lost in a crash")
	}
	if len(out) > 0 {
		lt.net.Touch("decisions lost in a crash")
	}
	lt.mu.Lock()
	lt.crashes = append(lt.crashes, crashed{at: now, in: in, out: out})
	lt.mu.Unlock()
}

// classify finds whether the final decision stream holds a decision of an
// input a crash lost (its cause and its time those of the input lost): its
// verdict, or a decision it derived, an expiry it fired (seed 68479 of the
// second long run kept only the expiry of the input lost, its verdict lost
// with the stream's tail); then the log is broken by the server's loss.
func (lt *lostTails) classify(l *chaos.Log) {
	type key struct {
		seq  uint64
		time int64
	}
	lost := map[key]time.Time{}
	for _, c := range lt.crashes {
		for _, m := range c.in {
			lost[key{m.Seq, m.Time.UnixNano()}] = c.at
		}
	}
	if len(lost) == 0 {
		return
	}
	for _, m := range l.Decisions {
		d, err := events.DecodeDecision(m.Data)
		if err != nil {
			continue
		}
		if at, ok := lost[key{d.Cause, d.At}]; ok && (!lt.broken || at.Before(lt.brokenAt)) {
			lt.broken, lt.brokenAt = true, at
		}
	}
	if lt.broken {
		lt.net.Touch("a verdict of an input lost in a crash is stored")
		return
	}
	for _, c := range lt.crashes {
		for _, m := range c.out {
			d, err := events.DecodeDecision(m.Data)
			if err != nil {
				continue
			}
			if at, ok := lost[key{d.Cause, d.At}]; ok && at.Before(c.at) {
				lt.brokenFor = true
			}
		}
	}
	if lt.brokenFor {
		lt.net.Touch("a verdict of an input lost in a crash was stored, until a later crash lost it")
	}
}

// refusalExcused reports whether a coordinator's refusal to go on was the
// right answer to a log broken for a while (brokenFor): the stored
// decisions diverged from the fold, or named an input missing (seed 52059
// of the first long run: a refusal at 16.0 s of a verdict of an input a
// crash at 15.9 s lost, which a crash at 16.5 s lost in its turn).
func (lt *lostTails) refusalExcused(err error) bool {
	if !lt.brokenFor || !(errors.Is(err, coordinator.ErrDivergence) || errors.Is(err, coordinator.ErrInputGap)) {
		return false
	}
	lt.net.Touch("a coordinator refused a log a crash broke for a while")
	return true
}

// excuse drops the acknowledgements of inputs the server lost after
// acknowledging them (the server's loss: no verdict is owed, and the
// input stream need not hold them), and returns the Msg-Ids dropped.
func (lt *lostTails) excuse(entries []chaos.Entry) ([]chaos.Entry, map[string]bool) {
	type key struct {
		id  string
		seq uint64
	}
	lost := map[key]bool{}
	for _, c := range lt.crashes {
		for _, m := range c.in {
			if id := m.Header.Get("Nats-Msg-Id"); id != "" {
				lost[key{id, m.Seq}] = true
			}
		}
	}
	if len(lost) == 0 {
		return entries, nil
	}
	ids := map[string]bool{}
	out := entries[:0:0]
	for _, e := range entries {
		if e.Kind == chaos.EntryAck && lost[key{e.MsgID, e.Seq}] {
			ids[e.MsgID] = true
			continue
		}
		out = append(out, e)
	}
	return out, ids
}

// excuseEffects drops the effects whose authority came from a decision
// the server lost (a grant, an accepted ACK of a queue offer, or a
// renewal the worker read, then lost in a
// crash: the sequences and the generation number may be used again by
// another grant; Tenure's fence cannot tell them apart, the loss is the
// server's, which --sync interval's documentation states).
func (lt *lostTails) excuseEffects(res *resource) int {
	type key struct {
		job    string
		gen    uint64
		holder string
	}
	lost := map[key]bool{}
	for _, c := range lt.crashes {
		for _, m := range c.out {
			d, err := events.DecodeDecision(m.Data)
			if err == nil && (d.Kind == events.KindGranted || d.Kind == events.KindAcked || d.Kind == events.KindRenewed) {
				lost[key{d.Job.ID, d.Job.Generation, d.Job.Holder}] = true
			}
		}
	}
	if len(lost) == 0 {
		return 0
	}
	res.mu.Lock()
	defer res.mu.Unlock()
	kept := res.accepted[:0:0]
	n := 0
	for _, e := range res.accepted {
		if lost[key{e.job, e.gen, e.worker}] {
			n++
			continue
		}
		kept = append(kept, e)
	}
	res.accepted = kept
	return n
}

// judgeBroken judges a run whose log a crash broke (inputs lost whose
// decisions were kept): no fold of the input stream gives the decision
// stream any more, and nothing can remove a stored decision. A
// coordinator must refuse to go on (Run returns ErrDivergence, saying so)
// and stop appending: a coordinator that read inputs before the crash
// (or a standby that goes live on its stale reading) may append until it
// finds them lost (inputKept, at its next leadership renewal: a third of
// the TTL), or its appends are fenced; an append stored later than bound
// after the coordinator's first append since the crash is a finding
// (a coordinator that went on, silently, on a log it cannot fold), and so
// is a refusal for another reason.
func (lt *lostTails) judgeBroken(rep *Report, refusals []error, bound time.Duration) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	first := map[string]time.Time{} // each coordinator's first append after the break
	for _, a := range lt.appends {
		if a.at.Before(lt.brokenAt) {
			continue
		}
		if _, ok := first[a.actor]; !ok {
			first[a.actor] = a.at
		}
		if a.at.After(first[a.actor].Add(bound)) {
			rep.finding("after the crash at %s lost inputs whose verdicts are stored, %s appended decisions %d to %d at %s: a coordinator went on on a log it cannot fold", lt.brokenAt.Format("15:04:05.000"), a.actor, a.first, a.last, a.at.Format("15:04:05.000"))
		}
	}
	for _, err := range refusals {
		if !errors.Is(err, coordinator.ErrDivergence) && !errors.Is(err, coordinator.ErrInputGap) {
			rep.finding("after the crash at %s broke the log, a coordinator refused for another reason: %v", lt.brokenAt.Format("15:04:05.000"), err)
		}
	}
	if len(refusals) > 0 {
		lt.net.Touch("a coordinator refused the log a crash broke")
	}
}

// describe is the crashes, for a failing seed's report.
func (lt *lostTails) describe() string {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	var b strings.Builder
	for _, c := range lt.crashes {
		fmt.Fprintf(&b, "crash at %s: lost %s and %s; ", c.at.Format("15:04:05.000"), span("inputs", c.in), span("decisions", c.out))
	}
	return b.String()
}

func span(what string, ms []jsmodel.Msg) string {
	if len(ms) == 0 {
		return "no " + what
	}
	return fmt.Sprintf("%s %d to %d", what, ms[0].Seq, ms[len(ms)-1].Seq)
}
