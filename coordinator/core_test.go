package coordinator

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/nats-io/nats.go"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/projector"
	"github.com/maknow/tenure/streams"
	"github.com/maknow/tenure/tracing"
)

// coreHarness drives a core as a session's loop would, with no server: the
// input stream is a slice, and the decision stream the reference fold
// (ref, a core that folds every input and never sends) derives.
type coreHarness struct {
	k      core
	ref    core
	inputs []stored // the input stream
	read   int      // inputs handed to k so far
}

func newCoreHarness() *coreHarness {
	return &coreHarness{k: newCore(streams.Topology{}), ref: newCore(streams.Topology{})}
}

// TestCore runs the scenario files in testdata/core (datadriven format;
// rewrite expectations with -rewrite and review the diff). Commands:
//
//	in t=<offset> <role>.<actor>.<job>.<verb> [seq=<n>] [src=<n>] [trace=<name>]
//	    one stored input (body below); src: sourced from its worker's intake
//	    stream at that sequence; trace: with a traceparent header (testTrace:
//	    a valid one per name, or a malformed one named bad-...; a decision
//	    that carries one shows its name). Live, the core folds it at once and the
//	    output is its decisions; in standby it is only stored (the core reads
//	    inputs when a decision needs them).
//	decision <seq> [subject=<s>] [cause=<n>] [index=<n>/<of>] [chain=none|upper|other] [body]
//	    the stored decision seq as the reference fold derives it, changed as
//	    the arguments say (body: replaced by the command's input); the core
//	    matches it (standby), folding the inputs it needs.
//	live                     standby ends
//	send [n]                 the first n unsent decisions (all by default) leave
//	ack <seq>                the stream acknowledges the decisions up to seq
//	state                    the core's sequences
//	reset                    a fresh core, streams and reference
//	tick t=<offset> [appended]    the tick timer fires: is a tick wanted (and appended)?
//	tick stored|refused      the stream answers the last tick's append
//	policy [ttl=<d>] [every=<n>] [interval=<d>] [heads=<d>]
//	    the configuration the policies read (LeaderTTL, SnapshotEvery,
//	    SnapshotInterval, HeadInterval)
//	leader taken|renewed t=<offset>   the entry was taken, or a renewal
//	    started at t succeeded
//	leader t=<offset>        can the leadership have expired at t?
//	snapshot t=<offset> [timer] [taken]   is a snapshot due at t (the
//	    snapshot timer fired: timer)? taken: it is taken then
//	head t=<offset> [last=<seq>] [at=<offset>]   is a signed head wanted at
//	    t, the last published being of decision seq at offset at?
//
// Each command's output ends with the core's invariants (check) when they
// do not hold.
func TestCore(t *testing.T) {
	files, err := filepath.Glob("testdata/core/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenario files in testdata/core (%v)", err)
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			h := newCoreHarness()
			datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
				out := h.run(t, d)
				if err := h.k.check(); err != nil {
					out += "INVARIANT: " + err.Error() + "\n"
				}
				return out
			})
		})
	}
}

func (h *coreHarness) run(t *testing.T, d *datadriven.TestData) string {
	switch d.Cmd {
	case "reset":
		*h = *newCoreHarness()
		return "ok\n"
	case "traces":
		// traces max=<n>: the jobs whose trace context the core remembers
		// at most; traces: how many it remembers.
		for _, a := range d.CmdArgs {
			if a.Key == "max" {
				h.k.traces.max, _ = strconv.Atoi(a.Vals[0])
			}
		}
		return fmt.Sprintf("%d jobs' trace context remembered\n", len(h.k.traces.jobs))
	case "in":
		seq, src := uint64(len(h.inputs)+1), uint64(0)
		var traces []string
		var args []datadriven.CmdArg
		for _, a := range d.CmdArgs {
			switch a.Key {
			case "seq":
				seq, _ = strconv.ParseUint(a.Vals[0], 10, 64)
			case "src":
				src, _ = strconv.ParseUint(a.Vals[0], 10, 64)
			case "trace":
				traces = append(traces, a.Vals...)
			default:
				args = append(args, a)
			}
		}
		d.CmdArgs = args
		raw, err := testutil.ScenarioInput(d, seq)
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		m := stored{seq: raw.Seq, time: raw.Time, subject: raw.Subject, data: raw.Body}
		if src > 0 {
			w, _ := intakeActor(raw.Subject)
			m.header = nats.Header{}
			m.header.Set(streams.HeaderStreamSource, fmt.Sprintf("%s %d > > %s", streams.Topology{}.IntakeStream(w), src, raw.Subject))
		}
		for _, name := range traces {
			if m.header == nil {
				m.header = nats.Header{}
			}
			m.header.Add(tracing.HeaderTraceParent, testTrace(name))
		}
		h.inputs = append(h.inputs, m)
		if _, err := h.ref.fold(m); err != nil {
			// The reference takes only the stream as it should be.
			h.ref = newCore(streams.Topology{})
			for _, in := range h.inputs[:len(h.inputs)-1] {
				_, _ = h.ref.fold(in)
			}
		}
		if !h.k.live {
			return fmt.Sprintf("stored input %d\n", m.seq)
		}
		return h.fold()
	case "decision":
		seq := posArg(t, d)
		if seq == 0 || seq > uint64(len(h.ref.pend)) {
			d.Fatalf(t, "the reference fold derived %d decisions", len(h.ref.pend))
		}
		want := h.ref.pend[seq-1]
		sd := stored{seq: seq, subject: want.subject, data: want.body, header: nats.Header{}}
		sd.header.Set(events.HeaderCause, strconv.FormatUint(want.cause, 10))
		sd.header.Set(events.HeaderIndex, fmt.Sprintf("%d/%d", want.n, want.of))
		sd.header.Set(events.HeaderChain, want.chain.String())
		for _, a := range d.CmdArgs[1:] {
			switch a.Key {
			case "subject":
				sd.subject = a.Vals[0]
			case "cause":
				sd.header.Set(events.HeaderCause, a.Vals[0])
			case "index":
				sd.header.Set(events.HeaderIndex, a.Vals[0])
			case "body":
				sd.data = []byte(d.Input)
			case "chain":
				switch a.Vals[0] {
				case "none":
					sd.header.Del(events.HeaderChain)
				case "upper":
					sd.header.Set(events.HeaderChain, strings.ToUpper(want.chain.String()))
				case "other":
					c := want.chain
					c[0] ^= 1
					sd.header.Set(events.HeaderChain, c.String())
				}
			default:
				d.Fatalf(t, "unknown argument %s", a)
			}
		}
		var b strings.Builder
		for {
			need, err := h.k.match(sd)
			if err != nil {
				// The first line: the rest shows both bodies.
				line, _, _ := strings.Cut(err.Error(), "\n")
				fmt.Fprintf(&b, "error: %s\n", line)
				return b.String()
			}
			if need == 0 {
				fmt.Fprintf(&b, "matched decision %d\n", seq)
				return b.String()
			}
			if h.read >= len(h.inputs) {
				fmt.Fprintf(&b, "needs input %d: not stored\n", need)
				return b.String()
			}
			m := h.inputs[h.read]
			h.read++
			f, err := h.k.fold(m)
			if err != nil {
				fmt.Fprintf(&b, "error: %v\n", err)
				return b.String()
			}
			fmt.Fprintf(&b, "needs input %d: folded input %d (%d decisions)\n", need, m.seq, len(f.ds))
		}
	case "live":
		h.k.goLive(testTickSubject)
		// Live, the loop reads every input stored and not yet folded.
		return h.fold() + h.state()
	case "send":
		n := len(h.k.unsent())
		if len(d.CmdArgs) > 0 {
			n = int(posArg(t, d))
		}
		var b strings.Builder
		for _, p := range h.k.unsent()[:n] {
			fmt.Fprintf(&b, "sent decision %d (input %d, %d/%d)\n", p.seq, p.cause, p.n, p.of)
		}
		h.k.sent(n)
		return b.String() + h.state()
	case "ack":
		seq := posArg(t, d)
		var chain events.Chain
		var cause uint64
		if seq > 0 && seq <= uint64(len(h.ref.pend)) {
			chain, cause = h.ref.pend[seq-1].chain, h.ref.pend[seq-1].cause
		}
		if err := h.k.ack(seq, chain, cause); err != nil {
			return "error: " + err.Error() + "\n"
		}
		return h.state()
	case "state":
		return h.state()
	case "policy":
		for _, a := range d.CmdArgs {
			switch a.Key {
			case "ttl":
				h.k.pol.leaderTTL = durArg(t, d, a)
			case "every":
				h.k.pol.snapshotEvery, _ = strconv.Atoi(a.Vals[0])
			case "interval":
				h.k.pol.snapshotInterval = durArg(t, d, a)
			case "heads":
				h.k.pol.headInterval = durArg(t, d, a)
			}
		}
		p := h.k.pol
		return fmt.Sprintf("leader TTL %v (margin %v), a snapshot every %d inputs or %v, heads every %v\n",
			p.leaderTTL, leaderMargin(p.leaderTTL), p.snapshotEvery, p.snapshotInterval, p.headInterval)
	case "leader":
		at, what := timeArg(t, d)
		switch what {
		case "taken":
			h.k.leaderTaken(at)
		case "renewed":
			h.k.leaderRenewed(at)
		case "":
			if h.k.leaderValid(at) {
				return fmt.Sprintf("valid at +%v (until +%v)\n", time.Duration(at-testutil.ScenarioBase), h.validFor())
			}
			return fmt.Sprintf("may have expired at +%v (valid until +%v): leave live\n", time.Duration(at-testutil.ScenarioBase), h.validFor())
		default:
			d.Fatalf(t, "leader %s?", what)
		}
		return fmt.Sprintf("valid until +%v\n", h.validFor())
	case "snapshot":
		at, _ := timeArg(t, d)
		timer, take := d.HasArg("timer"), d.HasArg("taken")
		if !h.k.snapshotDue(at, timer) {
			return fmt.Sprintf("no snapshot due (%d inputs since the last)\n", h.k.sinceSnap)
		}
		out := fmt.Sprintf("a snapshot due after input %d (%d inputs since the last)", h.k.p.LastSeq(), h.k.sinceSnap)
		if take {
			h.k.snapshotted(at)
			out += ": taken"
		}
		return out + "\n"
	case "head":
		at, _ := timeArg(t, d)
		var lastSeq uint64
		var lastAt int64
		for _, a := range d.CmdArgs {
			switch a.Key {
			case "last":
				lastSeq, _ = strconv.ParseUint(a.Vals[0], 10, 64)
			case "at":
				lastAt = testutil.ScenarioBase + int64(durArg(t, d, a))
			}
		}
		if !h.k.headWanted(at, lastSeq, lastAt) {
			return "no head wanted\n"
		}
		seq, chain, cause := h.k.headOf()
		return fmt.Sprintf("a head wanted: decision %d (chain %.8s), input %d\n", seq, chain.String(), cause)
	case "tick":
		// tick t=<offset> [appended|stored|refused]: the loop's tick timer
		// fires at t (the tick policy: is a tick wanted?), or the
		// stream answers the last tick's append.
		at, what := timeArg(t, d)
		switch what {
		case "stored", "refused":
			h.k.tickAnswered(what == "stored")
			return fmt.Sprintf("tick %s\n", what)
		}
		dl, ok := h.k.tickWanted(at)
		if !ok {
			return "no tick wanted\n"
		}
		out := fmt.Sprintf("a tick wanted for the deadline at +%v", time.Duration(dl-testutil.ScenarioBase))
		if what == "appended" {
			h.k.tickAppended(dl, at)
			out += fmt.Sprintf(": appended (look again in %v)", h.k.tickRetry())
		}
		return out + "\n"
	}
	d.Fatalf(t, "unknown command %s", d.Cmd)
	return ""
}

// testTrace is the traceparent a scenario names: a valid one per name,
// or, for bad-long, bad-upper, bad-version, bad-zero-trace and
// bad-zero-parent, one the coordinator must not pass on.
func testTrace(name string) string {
	sum := sha256.Sum256([]byte(name))
	h := hex.EncodeToString(sum[:])
	tid, pid := h[:32], h[32:48]
	switch name {
	case "bad-long":
		return "00-" + tid + "-" + pid + "-01-00"
	case "bad-upper":
		return "00-" + strings.ToUpper(tid) + "-" + pid + "-01"
	case "bad-version":
		return "01-" + tid + "-" + pid + "-01"
	case "bad-zero-trace":
		return "00-" + strings.Repeat("0", 32) + "-" + pid + "-01"
	case "bad-zero-parent":
		return "00-" + tid + "-" + strings.Repeat("0", 16) + "-01"
	}
	return "00-" + tid + "-" + pid + "-01"
}

// testTraceName is the name testTrace gave tp, or tp itself.
func testTraceName(tp string) string {
	for _, n := range []string{"s1", "s2", "s3", "s4", "s5", "w1", "w2", "x1", "bad-long", "bad-upper", "bad-version", "bad-zero-trace", "bad-zero-parent"} {
		if testTrace(n) == tp {
			return n
		}
	}
	return tp
}

var testTickSubject = events.InputSubject(events.RoleCoord, "c1", events.NoJob, events.VerbTick)

// posArg reads the command's first argument, a number.
func posArg(t *testing.T, d *datadriven.TestData) uint64 {
	if len(d.CmdArgs) == 0 {
		d.Fatalf(t, "%s needs a number", d.Cmd)
	}
	n, err := strconv.ParseUint(d.CmdArgs[0].Key, 10, 64)
	if err != nil {
		d.Fatalf(t, "%s: %v", d.Cmd, err)
	}
	return n
}

// fold folds (live) every input stored and not yet read.
func (h *coreHarness) fold() string {
	var b strings.Builder
	for h.read < len(h.inputs) {
		m := h.inputs[h.read]
		h.read++
		f, err := h.k.fold(m)
		if err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
			return b.String()
		}
		for i := range f.ds {
			p := h.k.pend[len(h.k.pend)-len(f.ds)+i]
			src := ""
			if p.src > 0 {
				src = fmt.Sprintf(" src=%d", p.src)
			}
			if p.trace != "" {
				src += " trace=" + testTraceName(p.trace)
			}
			fmt.Fprintf(&b, "decision %d%s: %s\n", p.seq, src, projector.Describe(&f.ds[i], testutil.ScenarioBase))
		}
	}
	return b.String()
}

// validFor is the leadership's validUntil as an offset.
func (h *coreHarness) validFor() time.Duration {
	return time.Duration(h.k.lead.validUntil - testutil.ScenarioBase)
}

// durArg parses a duration argument.
func durArg(t *testing.T, d *datadriven.TestData, a datadriven.CmdArg) time.Duration {
	v, err := time.ParseDuration(a.Vals[0])
	if err != nil {
		d.Fatalf(t, "%s: %v", a.Key, err)
	}
	return v
}

// timeArg returns the command's t=<offset> as a time (Unix ns) and its
// first argument without a value ("" if none).
func timeArg(t *testing.T, d *datadriven.TestData) (int64, string) {
	var at int64
	what := ""
	for _, a := range d.CmdArgs {
		switch {
		case a.Key == "t":
			at = testutil.ScenarioBase + int64(durArg(t, d, a))
		case len(a.Vals) == 0 && what == "":
			what = a.Key
		}
	}
	return at, what
}

func (h *coreHarness) state() string {
	k := &h.k
	phase := "standby"
	if k.live {
		phase = "live"
	}
	return fmt.Sprintf("%s: input %d folded, decision %d derived (chain %.8s), %d pending, verified/derived %d, sent %d, acknowledged %d\n",
		phase, k.p.LastSeq(), k.headSeq, k.head.String(), len(k.pend), k.decSeq, k.sentSeq, k.acked)
}

// Any sequence of the loop's steps keeps the core's invariants, and a core
// that verifies a prefix of the log, goes live and sends and acknowledges
// the rest derives exactly the reference's decisions and chain.
func TestCoreSteps(t *testing.T) {
	verbs := []struct {
		verb events.Verb
		body string
	}{
		{events.VerbAcquire, `{"v":1,"lease_ms":%d}`},
		{events.VerbRenew, `{"v":1,"lease_id":"L%d","generation":1}`},
		{events.VerbRelease, `{"v":1,"lease_id":"L%d","generation":1}`},
		{events.VerbProgress, `{"v":1,"lease_id":"L%d","generation":1,"progress":{"pct":5}}`},
	}
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 1))
		var inputs []stored
		ref := newCore(streams.Topology{})
		n := 5 + r.IntN(60)
		for i := range n {
			v := verbs[r.IntN(len(verbs))]
			m := stored{
				seq: uint64(i + 1), time: testutil.ScenarioBase + int64(i)*int64(r.IntN(400)+1)*1e6,
				subject: events.InputSubject(events.RoleWorker, fmt.Sprintf("w%d", r.IntN(3)), fmt.Sprintf("j%d", r.IntN(4)), v.verb),
				data:    fmt.Appendf(nil, v.body, 1+r.IntN(max(i, 1))*(1+r.IntN(900))),
			}
			inputs = append(inputs, m)
			if _, err := ref.fold(m); err != nil {
				t.Fatal(err)
			}
		}
		k := newCore(streams.Topology{})
		step := func(what string) {
			if err := k.check(); err != nil {
				t.Fatalf("seed %d, after %s: %v", seed, what, err)
			}
		}
		// Standby: a prefix of the decisions verified.
		read := 0
		verified := r.IntN(len(ref.pend) + 1)
		for _, want := range ref.pend[:verified] {
			sd := stored{seq: want.seq, subject: want.subject, data: want.body, header: nats.Header{}}
			sd.header.Set(events.HeaderCause, strconv.FormatUint(want.cause, 10))
			sd.header.Set(events.HeaderIndex, fmt.Sprintf("%d/%d", want.n, want.of))
			sd.header.Set(events.HeaderChain, want.chain.String())
			for {
				need, err := k.match(sd)
				if err != nil {
					t.Fatalf("seed %d: decision %d: %v", seed, want.seq, err)
				}
				if need == 0 {
					break
				}
				if _, err := k.fold(inputs[read]); err != nil {
					t.Fatal(err)
				}
				read++
				step("a fold in standby")
			}
			step("a match")
		}
		k.goLive(testTickSubject)
		step("going live")
		var sent []pending
		for read < len(inputs) || len(k.unsent()) > 0 || k.acked < k.sentSeq {
			switch r.IntN(3) {
			case 0:
				if read < len(inputs) {
					if _, err := k.fold(inputs[read]); err != nil {
						t.Fatal(err)
					}
					read++
					step("a live fold")
				}
			case 1:
				if u := k.unsent(); len(u) > 0 {
					n := 1 + r.IntN(len(u))
					for _, p := range u[:n] {
						p.body = slices.Clone(p.body) // the appender copies them out too
						sent = append(sent, p)
					}
					k.sent(n)
					step("a send")
				}
			case 2:
				if k.acked < k.sentSeq {
					last := k.acked + 1 + uint64(r.IntN(int(k.sentSeq-k.acked)))
					p := ref.pend[last-1]
					if err := k.ack(last, p.chain, p.cause); err != nil {
						t.Fatalf("seed %d: %v", seed, err)
					}
					step("an acknowledgement")
				}
			}
		}
		if k.head != ref.head || k.headSeq != ref.headSeq || k.acked != ref.headSeq {
			t.Fatalf("seed %d: the core ends at decision %d acknowledged %d chain %s, the reference at %d chain %s",
				seed, k.headSeq, k.acked, k.head, ref.headSeq, ref.head)
		}
		for i, p := range sent {
			w := ref.pend[verified+i]
			if p.seq != w.seq || p.subject != w.subject || string(p.body) != string(w.body) || p.chain != w.chain || p.cause != w.cause {
				t.Fatalf("seed %d: decision %d sent differs from the reference's", seed, p.seq)
			}
		}
		if len(sent) != len(ref.pend)-verified {
			t.Fatalf("seed %d: %d decisions sent, want %d", seed, len(sent), len(ref.pend)-verified)
		}
		// Acknowledging again, or past what was sent, breaks an invariant.
		if err := k.ack(k.acked, k.ackedChain, k.ackedCause); err == nil {
			t.Fatalf("seed %d: decision %d acknowledged twice without an error", seed, k.acked)
		}
	}
}
