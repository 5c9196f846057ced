package modelcheck

import (
	"bytes"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/projector"
)

// RuleStep is the finding of a Step that returned an error or panicked.
const RuleStep = "step"

// Options tune a run.
type Options struct {
	// Stop ends the run at the end of the depth at which the first
	// violation was found (the shortest ones are all reported).
	Stop bool
	// Log, if set, gets a line per depth explored.
	Log io.Writer
}

// Violation is the first (shortest) transition found that fails one check.
type Violation struct {
	Rule   string // the rule (doc.go)
	Check  string // which of its checks
	Detail string
	Depth  int    // inputs after the setup, the failing one included
	Trace  string // those inputs, each with its decisions
}

// String renders the violation and its trace.
func (v *Violation) String() string {
	return fmt.Sprintf("violation rule=%s check=%s depth=%d: %s\n%s", v.Rule, v.Check, v.Depth, v.Detail, v.Trace)
}

// Result is what Run found.
type Result struct {
	Scope       Scope
	States      int   // distinct states reached, the one after the setup included
	Transitions int   // inputs stepped (each from a restored snapshot)
	Depth       int   // the deepest depth at which a new state was found
	Levels      []int // new states by depth (Levels[0] is the state after the setup)
	Violations  []Violation
	// Coverage counts the decisions of the transitions that broke no
	// rule, by the input's verb and the decision's kind and reason: what
	// the scope reached.
	Coverage map[Outcome]int
	Elapsed  time.Duration
}

// Outcome is a decision kind and reason in answer to (or caused by) an
// input of a verb.
type Outcome struct {
	Verb   events.Verb
	Kind   events.Kind
	Reason events.Reason
}

// String renders the outcome as "verb -> kind/reason".
func (o Outcome) String() string {
	return o.Verb.String() + " -> " + o.Kind.String() + "/" + string(o.Reason)
}

// CoverageTable renders Coverage, one outcome a line, sorted.
func (r *Result) CoverageTable() string {
	type row struct {
		o Outcome
		n int
	}
	var rows []row
	for o, n := range r.Coverage {
		rows = append(rows, row{o, n})
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].o.String() < rows[j].o.String() })
	var b strings.Builder
	for _, x := range rows {
		fmt.Fprintf(&b, "  %-60s %d\n", x.o, x.n)
	}
	return b.String()
}

// Summary is the result on one line.
func (r *Result) Summary() string {
	return fmt.Sprintf("modelcheck %s: states=%d transitions=%d depth=%d/%d violations=%d elapsed=%s",
		r.Scope.Name, r.States, r.Transitions, r.Depth, r.Scope.Depth, len(r.Violations), r.Elapsed.Round(time.Millisecond))
}

// checker holds a run's fixed parts.
type checker struct {
	s         Scope
	jobIdx    map[string]int
	workerIdx map[string]int
	retain    bool // some policy of the scope retires jobs
	setup     []events.Raw
}

// node is a state's place in the search: the input that reached it from
// its parent's state.
type node struct {
	parent *node
	raw    events.Raw
	depth  int
}

// path is the inputs from the setup to n, in order.
func (n *node) path() []events.Raw {
	var out []events.Raw
	for ; n != nil && n.parent != nil; n = n.parent {
		out = append(out, n.raw)
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// state is a state waiting to be expanded.
type state struct {
	snap []byte
	w    world
	n    *node
}

// Run explores scope s breadth first to its depth and checks every
// transition (doc.go). It returns an error only for a scope it cannot run.
func Run(s Scope, o Options) (*Result, error) {
	start := time.Now()
	if len(s.Jobs) == 0 || len(s.Jobs) > maxJobs || len(s.Workers) == 0 || len(s.Workers) > maxWorkers || s.Depth < 0 {
		return nil, fmt.Errorf("modelcheck: scope %s: 1 to %d jobs and 1 to %d workers", s.Name, maxJobs, maxWorkers)
	}
	c := &checker{s: s, jobIdx: map[string]int{}, workerIdx: map[string]int{},
		retain: s.Policy.Retain > 0 || s.AltPolicy != nil && s.AltPolicy.Retain > 0}
	for i, id := range s.Jobs {
		c.jobIdx[id] = i
	}
	for i, id := range s.Workers {
		c.workerIdx[id] = i
	}
	rev := s.Revision
	if rev == 0 {
		rev = events.CurrentRevision
	}
	if rev > events.CurrentRevision || s.Queue != "" && rev < events.Revision4 || c.retain && rev < events.Revision3 {
		return nil, fmt.Errorf("modelcheck: scope %s: revision %d has no queues or retention", s.Name, rev)
	}
	setup := []events.Input{{Role: events.RoleCoord, Actor: coordActor, Job: events.NoJob, Verb: events.VerbPolicy, Policy: s.Policy}}
	if rev > events.Revision1 {
		rules := events.Input{Role: events.RoleCoord, Actor: coordActor, Job: events.NoJob, Verb: events.VerbRules, Revision: rev, LeaseKey: leaseKey}
		setup = append([]events.Input{rules}, setup...)
	}
	for i, in := range setup {
		m := move{in: in, at: Base}
		c.setup = append(c.setup, m.raw(uint64(i+1)))
	}
	root := projector.New()
	for _, raw := range c.setup {
		ds, err := root.Step(raw)
		if err != nil || len(ds) != 1 || !ds[0].Kind.Accepted() {
			return nil, fmt.Errorf("modelcheck: scope %s: setup input %d: %v %v", s.Name, raw.Seq, err, describeAll(ds))
		}
	}

	r := &Result{Scope: s, States: 1, Levels: []int{1}, Coverage: map[Outcome]int{}}
	found := map[string]*Violation{}
	var order []string
	record := func(n *node, raw events.Raw, depth int, fs []finding) {
		for _, f := range fs {
			id := f.rule + "/" + f.check
			if found[id] != nil {
				continue
			}
			path := append(n.path(), raw)
			found[id] = &Violation{Rule: f.rule, Check: f.check, Detail: f.detail, Depth: depth, Trace: c.trace(path)}
			order = append(order, id)
		}
	}

	visited := map[stateKey]struct{}{}
	level := []state{{snap: root.Snapshot(), n: &node{}}}
	visited[c.key(root, &level[0].w)] = struct{}{}
	for depth := 1; depth <= s.Depth && len(level) > 0; depth++ {
		var next []state
		for _, st := range level {
			p0 := projector.New()
			if err := p0.Restore(st.snap); err != nil {
				return nil, fmt.Errorf("modelcheck: restore: %w", err)
			}
			b := c.before(p0)
			seq := p0.LastSeq() + 1
			var log []events.Raw // the whole input sequence to this state
			if s.Continuous {
				log = append(append(log, c.setup...), st.n.path()...)
			}
			for _, mv := range c.moves(p0, &st.w) {
				r.Transitions++
				raw := mv.raw(seq)
				var p *projector.Projector
				var ds []events.Decision
				var fs []finding
				if s.Continuous {
					p, ds, fs = c.continuous(log, st.snap, raw)
				} else {
					p = projector.New()
					if err := p.Restore(st.snap); err != nil {
						return nil, fmt.Errorf("modelcheck: restore: %w", err)
					}
					if ds, fs = step(p, raw); fs == nil {
						fs = c.again(st.snap, raw, ds, p)
					}
				}
				w := st.w
				if fs == nil {
					fs = c.judge(b, &w, &mv.in, raw, ds, p)
				}
				if len(fs) > 0 {
					record(st.n, raw, depth, fs)
					continue
				}
				for i := range ds {
					r.Coverage[Outcome{mv.in.Verb, ds[i].Kind, ds[i].Reason}]++
				}
				k := c.key(p, &w)
				if _, ok := visited[k]; ok {
					continue
				}
				visited[k] = struct{}{}
				n := &node{parent: st.n, raw: raw, depth: depth}
				if s.Cold && !s.Continuous {
					if fs := c.cold(n, ds, p); len(fs) > 0 {
						record(st.n, raw, depth, fs)
						continue
					}
				}
				next = append(next, state{snap: p.Snapshot(), w: w, n: n})
			}
		}
		r.Levels = append(r.Levels, len(next))
		r.States += len(next)
		if len(next) > 0 {
			r.Depth = depth
		}
		if o.Log != nil {
			fmt.Fprintf(o.Log, "modelcheck %s: depth %d: %d new states (%d in all), %d transitions, %d violations, %s\n",
				s.Name, depth, len(next), r.States, r.Transitions, len(order), time.Since(start).Round(time.Millisecond))
		}
		level = next
		if o.Stop && len(order) > 0 {
			break
		}
	}
	for _, id := range order {
		r.Violations = append(r.Violations, *found[id])
	}
	sort.SliceStable(r.Violations, func(i, j int) bool { return r.Violations[i].Depth < r.Violations[j].Depth })
	r.Elapsed = time.Since(start)
	return r, nil
}

// step steps raw on p, turning an error or a panic into a finding.
func step(p *projector.Projector, raw events.Raw) (ds []events.Decision, fs []finding) {
	defer func() {
		if v := recover(); v != nil {
			fs = []finding{{RuleStep, "panic", fmt.Sprintf("input %d panicked: %v", raw.Seq, v)}}
		}
	}()
	ds, err := p.Step(raw)
	if err != nil {
		return nil, []finding{{RuleStep, "error", fmt.Sprintf("input %d: %v", raw.Seq, err)}}
	}
	if len(ds) == 0 {
		return nil, []finding{{RuleVerdict, "one-verdict", fmt.Sprintf("input %d has no decision", raw.Seq)}}
	}
	return ds, nil
}

// again steps raw a second time on a projector restored from snap: the
// decisions and the state hash must be those of the first (determinism).
func (c *checker) again(snap []byte, raw events.Raw, ds []events.Decision, p *projector.Projector) []finding {
	q := projector.New()
	if err := q.Restore(snap); err != nil {
		return []finding{{RuleDeterminism, "restore", err.Error()}}
	}
	ds2, fs := step(q, raw)
	if fs != nil {
		return fs
	}
	if f := sameDecisions(ds, ds2, "the first", "a second projector restored from the same snapshot"); f != nil {
		return []finding{*f}
	}
	if p.StateHash() != q.StateHash() {
		return []finding{{RuleDeterminism, "state-hash", "a second projector restored from the same snapshot has another state hash"}}
	}
	return nil
}

// continuous steps raw on a projector that folded log from the start,
// and again on one restored from snap, the snapshot of the state log
// leads to: the decisions and the state hash must be the same. It returns
// the first, its decisions and the findings.
func (c *checker) continuous(log []events.Raw, snap []byte, raw events.Raw) (*projector.Projector, []events.Decision, []finding) {
	p := projector.New()
	for _, in := range log {
		if _, fs := step(p, in); fs != nil {
			return p, nil, fs
		}
	}
	ds, fs := step(p, raw)
	if fs != nil {
		return p, nil, fs
	}
	q := projector.New()
	if err := q.Restore(snap); err != nil {
		return p, ds, []finding{{RuleDeterminism, "restore", err.Error()}}
	}
	ds2, fs := step(q, raw)
	if fs != nil {
		return p, ds, fs
	}
	if f := sameDecisions(ds, ds2, "the projector that folded the whole log without a restore", "a projector restored from the last state's snapshot"); f != nil {
		f.check = "restored"
		return p, ds, []finding{*f}
	}
	if p.StateHash() != q.StateHash() {
		return p, ds, []finding{{RuleDeterminism, "restored-state-hash", fmt.Sprintf("a projector restored from the last state's snapshot has another state hash:\n  continuous: %s\n  restored:   %s",
			describeState(p, c.s.Jobs), describeState(q, c.s.Jobs))}}
	}
	return p, ds, nil
}

// cold replays n's whole input sequence on an empty projector: the state
// hash and the last input's decisions must be those of the projector
// restored from the parent's snapshot.
func (c *checker) cold(n *node, ds []events.Decision, p *projector.Projector) []finding {
	q := projector.New()
	var last []events.Decision
	for _, raw := range append(append([]events.Raw(nil), c.setup...), n.path()...) {
		var fs []finding
		if last, fs = step(q, raw); fs != nil {
			return fs
		}
	}
	if f := sameDecisions(ds, last, "the projector restored from the parent's snapshot", "the replay of the whole log on an empty projector"); f != nil {
		return []finding{*f}
	}
	if p.StateHash() != q.StateHash() {
		return []finding{{RuleDeterminism, "cold-state-hash", fmt.Sprintf("the replay of the whole log on an empty projector has another state hash:\n  restored: %s\n  replayed: %s",
			describeState(p, c.s.Jobs), describeState(q, c.s.Jobs))}}
	}
	return nil
}

// sameDecisions compares two decision lists. Equal values encode to the
// same bytes (events.AppendDecision is a function of the value); values
// that differ are compared by their encodings, byte for byte, which is
// what the decision stream holds.
func sameDecisions(a, b []events.Decision, first, what string) *finding {
	if len(a) != len(b) {
		return &finding{RuleDeterminism, "decisions", fmt.Sprintf("%s gives %d decisions:\n%swhere %s gives %d:\n%s", what, len(b), describeAll(b), first, len(a), describeAll(a))}
	}
	for i := range a {
		if equalDecisions(&a[i], &b[i]) {
			continue
		}
		x, y := events.AppendDecision(nil, &a[i]), events.AppendDecision(nil, &b[i])
		if !bytes.Equal(x, y) {
			return &finding{RuleDeterminism, "decisions", fmt.Sprintf("%s gives decision %d\n  %s\nwhere %s gives\n  %s", what, i, y, first, x)}
		}
	}
	return nil
}

// equalDecisions reports whether a and b are the same value, the values
// their pointers point to included.
func equalDecisions(a, b *events.Decision) bool {
	x, y := *a, *b
	if !eqPtr(x.Policy, y.Policy) || !eqPtr(x.Checkpoint, y.Checkpoint) || !eqPtr(x.Capacity, y.Capacity) || !eqPtr(x.Standing, y.Standing) {
		return false
	}
	x.Policy, x.Checkpoint, x.Capacity, x.Standing = nil, nil, nil, nil
	y.Policy, y.Checkpoint, y.Capacity, y.Standing = nil, nil, nil, nil
	return x == y
}

func eqPtr[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// trace renders an input sequence after the setup, each input with its
// decisions, by replaying it on an empty projector.
func (c *checker) trace(path []events.Raw) string {
	var b strings.Builder
	p := projector.New()
	for _, raw := range c.setup {
		_, _ = p.Step(raw)
	}
	for _, raw := range path {
		fmt.Fprintf(&b, "  input %d at %s: %s %s\n", raw.Seq, rel(raw.Time), strings.TrimPrefix(raw.Subject, events.InputPrefix+"."), raw.Body)
		ds, fs := step(p, raw)
		for _, f := range fs {
			fmt.Fprintf(&b, "      %s\n", f.detail)
		}
		for i := range ds {
			fmt.Fprintf(&b, "      %s\n", projector.Describe(&ds[i], Base))
		}
		if fs != nil {
			break
		}
	}
	return b.String()
}

// rel renders a stored time as an offset from Base.
func rel(t int64) string {
	if t == 0 {
		return "unset"
	}
	if t >= Base {
		return "t+" + time.Duration(t-Base).String()
	}
	return "t-" + time.Duration(Base-t).String()
}

// kr names a decision in a finding.
func kr(d *events.Decision) string {
	return fmt.Sprintf("#%d.%d %s/%s", d.Cause, d.N, d.Kind, d.Reason)
}

func describeJob(j *events.Job) string {
	return projector.DescribeJob(j, projector.MatrixOptions{Base: Base})
}

func describeAll(ds []events.Decision) string {
	var b strings.Builder
	for i := range ds {
		b.WriteString("    " + projector.Describe(&ds[i], Base) + "\n")
	}
	return b.String()
}

// describeState renders the projections of jobs.
func describeState(p *projector.Projector, jobs []string) string {
	var parts []string
	for _, id := range jobs {
		if j, ok := p.Job(id); ok {
			parts = append(parts, describeJob(&j))
		}
	}
	return strings.Join(parts, "; ")
}
