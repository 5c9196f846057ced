package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/maknow/tenure/events"
)

// defaultWait bounds a step that waits (await_*, expect_projection,
// caught_up) when it names no timeout_ms.
const defaultWait = 15 * time.Second

// Run plays every scenario of scenarios/ against the adapter a, one
// subtest each (named after the scenario's file), each on a deployment
// and an adapter process of its own.
func Run(t *testing.T, a Adapter) {
	t.Helper()
	scs, err := Scenarios()
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range scs {
		t.Run(sc.Name, func(t *testing.T) { RunScenario(t, a, sc) })
	}
}

// RunScenario plays one scenario against the adapter a: it starts an
// embedded nats-server and a coordinator, starts the adapter, plays the
// steps in order and ends the adapter's session with close. A step that
// fails ends the test, naming the scenario, the step and what was seen.
func RunScenario(t *testing.T, a Adapter, sc Scenario) {
	t.Helper()
	d, err := startDeployment(t, sc.StreamPrefix, sc.Worker, sc.Auth)
	if err != nil {
		t.Fatalf("scenario %s: deployment: %v", sc.Name, err)
	}
	s := &session{
		t: t, sc: sc, d: d, a: a, vars: map[string]any{},
		procs: map[string]*proc{}, gens: map[string]int{}, closed: map[string]bool{},
		marks: map[string]mark{}, pending: map[string]pendingReply{},
		env: append(d.adapterEnv(sc.Worker),
			"TENURE_WORKER_ID="+sc.Worker,
			"TENURE_STREAM_PREFIX="+sc.StreamPrefix,
			"TENURE_ADAPTER_PROTOCOL=1",
		),
	}
	t.Cleanup(func() {
		for _, p := range s.procs {
			p.kill()
			<-p.exited
		}
	})
	if err := s.startAdapter(""); err != nil {
		t.Fatalf("scenario %s: %v", sc.Name, err)
	}
	for i, st := range sc.Steps {
		s.step = i + 1
		if err := s.play(st); err != nil {
			s.fail(st, err)
		}
		for _, name := range s.names() {
			if err := s.procs[name].brokenErr(); err != nil {
				s.fail(st, fmt.Errorf("adapter %s protocol: %w", procName(name), err))
			}
		}
	}
	s.finish()
}

// session is one scenario being played.
type session struct {
	t       *testing.T
	sc      Scenario
	d       *deployment
	a       Adapter
	env     []string                // the adapter processes' environment
	procs   map[string]*proc        // the running adapter processes by name ("": the first)
	gens    map[string]int          // how many processes of each name were started
	gone    []*proc                 // those killed, for the logs
	closed  map[string]bool         // the processes the scenario sent close
	step    int                     // 1-based, for messages
	vars    map[string]any          // what steps kept with "as"
	marks   map[string]mark         // positions kept by "mark"
	pending map[string]pendingReply // async commands by "as"
}

// pendingReply is an async command's reply to come, and who sends it.
type pendingReply struct {
	p  *proc
	ch <-chan map[string]any
}

// mark is a position in the logs: each process's events (by name, with
// the process it was then), the decisions and the inputs.
type mark struct {
	events            map[string]eventPos
	decisions, inputs int
}

type eventPos struct{ gen, n int }

// procName names an adapter process in messages.
func procName(name string) string {
	if name == "" {
		return "the adapter"
	}
	return "adapter " + strconv.Quote(name)
}

// names are the running processes' names, in order.
func (s *session) names() []string {
	return slices.Sorted(maps.Keys(s.procs))
}

// startAdapter starts a process of the adapter under name (the scenario's
// worker id, as every other).
func (s *session) startAdapter(name string) error {
	if _, ok := s.procs[name]; ok {
		return fmt.Errorf("%s runs already", procName(name))
	}
	p, err := startProc(s.a, s.env)
	if err != nil {
		return err
	}
	s.procs[name] = p
	s.gens[name]++
	delete(s.closed, name)
	return nil
}

// killAdapter kills process name and its process group at once (SIGKILL:
// a crash, nothing of it runs on) and waits for its end.
func (s *session) killAdapter(name string) error {
	p, ok := s.procs[name]
	if !ok {
		return fmt.Errorf("no %s runs", procName(name))
	}
	p.kill()
	<-p.exited
	delete(s.procs, name)
	s.gone = append(s.gone, p)
	return nil
}

// proc is the process a step names with "on" (default: the first).
func (s *session) proc(st Step) (string, *proc, error) {
	name, _ := st.Fields["on"].(string)
	p, ok := s.procs[name]
	if !ok {
		return name, nil, fmt.Errorf("no %s runs", procName(name))
	}
	return name, p, nil
}

func (s *session) fail(st Step, err error) {
	s.t.Helper()
	for _, p := range s.gone {
		s.t.Logf("stderr of an adapter process killed earlier:\n%s", tail(p.stderr.String(), 3000))
	}
	for _, name := range s.names() {
		p := s.procs[name]
		s.t.Logf("%s stderr:\n%s", procName(name), tail(p.stderr.String(), 6000))
		s.t.Logf("%s events (last 40):\n%s", procName(name), describeEvents(p.events.snapshot(max(0, p.events.len()-40))))
	}
	s.t.Logf("decisions (last 60):\n%s", describeDecisions(s.d.decisions.snapshot(max(0, s.d.decisions.len()-60))))
	s.t.Fatalf("scenario %s: step %d (%s %s): %v", s.sc.Name, s.step, st.Op, st, err)
}

// finish ends the session of every process still running: close (unless
// the scenario sent it), the end of stdin, and the adapter's exit with
// status 0.
func (s *session) finish() {
	s.t.Helper()
	end := Step{Op: "end", Fields: map[string]any{"end": "close, then end of stdin"}}
	for _, name := range s.names() {
		p := s.procs[name]
		if !s.closed[name] {
			_, ch, err := p.send("close", nil)
			if err == nil {
				_, err = p.reply(ch, replyTimeout)
			}
			if err != nil {
				s.fail(end, fmt.Errorf("%s: %w", procName(name), err))
			}
		}
		if err := p.end(); err != nil {
			s.fail(end, fmt.Errorf("%s exit: %w", procName(name), err))
		}
		if err := p.brokenErr(); err != nil {
			s.fail(end, fmt.Errorf("%s protocol: %w", procName(name), err))
		}
		delete(s.procs, name)
	}
}

// lookup is the value of a reference name.field.field.
func (s *session) lookup(ref string) (any, error) {
	if ref == "worker" {
		return s.sc.Worker, nil
	}
	parts := strings.Split(ref, ".")
	v, ok := s.vars[parts[0]]
	if !ok {
		return nil, fmt.Errorf("${%s}: no step kept %q", ref, parts[0])
	}
	v, err := field(v, parts[1:])
	if err != nil {
		return nil, fmt.Errorf("${%s}: %w", ref, err)
	}
	return v, nil
}

// get is field name of the step, references substituted.
func (s *session) get(st Step, name string) (any, error) {
	return substitute(st.Fields[name], s.lookup)
}

func (s *session) keep(st Step, v any) {
	if name, ok := st.Fields["as"].(string); ok {
		s.vars[name] = v
	}
}

func (s *session) timeout(st Step, def time.Duration) time.Duration {
	if ms, ok := st.Fields["timeout_ms"].(float64); ok {
		return time.Duration(ms) * time.Millisecond
	}
	return def
}

// eventsOf is where the events of process name, the gen-th of its name,
// were at the mark: from its start if it was not running then.
func (m mark) eventsOf(name string, gen int) int {
	if p, ok := m.events[name]; ok && p.gen == gen {
		return p.n
	}
	return 0
}

// consumers lists the consumers of the decision stream that read the
// scenario's worker's decisions (filtered to tenure.out.<worker>.>), or
// deletes them, as an operator may; "count" is how many there must be,
// "as" keeps {"names": [...]}.
func (s *session) consumers(st Step) error {
	op := st.Fields["consumers"]
	if op != "list" && op != "delete" {
		return errors.New(`consumers: want "list" or "delete"`)
	}
	ctx, cancel := context.WithTimeout(context.Background(), defaultWait)
	defer cancel()
	names, err := s.d.workerConsumers(ctx, s.sc.Worker)
	if err != nil {
		return err
	}
	if want, ok := st.Fields["count"].(float64); ok && float64(len(names)) != want {
		return fmt.Errorf("%d consumers of %s's decisions %v, want %v", len(names), s.sc.Worker, names, want)
	}
	if op == "delete" {
		if len(names) == 0 {
			return fmt.Errorf("no consumer of %s's decisions to delete", s.sc.Worker)
		}
		for _, n := range names {
			if err := s.d.js.DeleteConsumer(ctx, s.d.topo.DecisionStream(), n); err != nil {
				return fmt.Errorf("delete consumer %s: %w", n, err)
			}
		}
	}
	list := make([]any, len(names))
	for i, n := range names {
		list[i] = n
	}
	s.keep(st, map[string]any{"names": list})
	return nil
}

func (s *session) since(st Step) (mark, error) {
	name, ok := st.Fields["since"].(string)
	if !ok {
		return mark{}, nil
	}
	m, ok := s.marks[name]
	if !ok {
		return mark{}, fmt.Errorf("since: no mark %q", name)
	}
	return m, nil
}

func (s *session) play(st Step) error {
	switch st.Op {
	case "do":
		return s.do(st)
	case "await_reply":
		name, _ := st.Fields["await_reply"].(string)
		r, ok := s.pending[name]
		if !ok {
			return fmt.Errorf("no async command %q", name)
		}
		delete(s.pending, name)
		m, err := r.p.reply(r.ch, s.timeout(st, replyTimeout))
		if err != nil {
			return err
		}
		return s.checkReply(st, m)
	case "publish":
		return s.publish(st)
	case "await_event", "await_decision", "await_input":
		return s.await(st)
	case "expect_projection":
		return s.expectProjection(st)
	case "expect_count":
		return s.expectCount(st)
	case "expect_order":
		return s.expectOrder(st)
	case "expect_newer_token":
		return s.expectNewerToken(st)
	case "expect_equal":
		v, err := s.get(st, "expect_equal")
		if err != nil {
			return err
		}
		vs, ok := v.([]any)
		if !ok || len(vs) != 2 {
			return errors.New("expect_equal: want two values")
		}
		if !reflect.DeepEqual(vs[0], vs[1]) {
			return fmt.Errorf("have %s and %s: want them equal", text(vs[0]), text(vs[1]))
		}
		return nil
	case "coordinator":
		switch st.Fields["coordinator"] {
		case "stop":
			return s.d.stopCoordinator()
		case "start":
			return s.d.startCoordinator()
		case "restart":
			if err := s.d.stopCoordinator(); err != nil {
				return err
			}
			return s.d.startCoordinator()
		}
		return fmt.Errorf("coordinator: want stop, start or restart")
	case "sleep_ms":
		ms, _ := st.Fields["sleep_ms"].(float64)
		time.Sleep(time.Duration(ms) * time.Millisecond)
		return nil
	case "mark":
		name, _ := st.Fields["mark"].(string)
		inputs, decisions, err := s.d.stored(defaultWait)
		if err != nil {
			return fmt.Errorf("mark %s: %w", name, err)
		}
		m := mark{events: map[string]eventPos{}, decisions: decisions, inputs: inputs}
		for n, p := range s.procs {
			m.events[n] = eventPos{gen: s.gens[n], n: p.events.len()}
		}
		s.marks[name] = m
		return nil
	case "caught_up":
		return s.d.caughtUp(s.timeout(st, defaultWait))
	case "adapter":
		name, _ := st.Fields["name"].(string)
		switch st.Fields["adapter"] {
		case "start":
			return s.startAdapter(name)
		case "kill":
			return s.killAdapter(name)
		}
		return errors.New(`adapter: want "start" or "kill"`)
	case "consumers":
		return s.consumers(st)
	}
	return fmt.Errorf("unknown operation %s", st.Op)
}

func (s *session) do(st Step) error {
	pname, p, err := s.proc(st)
	if err != nil {
		return err
	}
	name := st.Fields["do"].(string)
	args := map[string]any{}
	for k, v := range st.Fields {
		if !contains(reservedDo, k) {
			sv, err := substitute(v, s.lookup)
			if err != nil {
				return err
			}
			args[k] = sv
		}
	}
	if name == "close" {
		s.closed[pname] = true
	}
	_, ch, err := p.send(name, args)
	if err != nil {
		return err
	}
	if async, _ := st.Fields["async"].(bool); async {
		s.pending[st.Fields["as"].(string)] = pendingReply{p: p, ch: ch}
		return nil
	}
	m, err := p.reply(ch, replyTimeout)
	if err != nil {
		return err
	}
	return s.checkReply(st, m)
}

// checkReply checks a reply against the step's "error" or "result" and
// keeps the result (or the error object) under "as".
func (s *session) checkReply(st Step, m map[string]any) error {
	ok, _ := m["ok"].(bool)
	want, wantErr := st.Fields["error"]
	if wantErr {
		if ok {
			return fmt.Errorf("reply %s: want an error matching %s", text(m), text(want))
		}
		p, err := s.get(st, "error")
		if err != nil {
			return err
		}
		if err := match(p, m["error"]); err != nil {
			return fmt.Errorf("error %s: %w", text(m["error"]), err)
		}
		s.keep(st, m["error"])
		return nil
	}
	if !ok {
		return fmt.Errorf("reply is an error: %s", text(m["error"]))
	}
	if _, has := st.Fields["result"]; has {
		p, err := s.get(st, "result")
		if err != nil {
			return err
		}
		if err := match(p, m["result"]); err != nil {
			return fmt.Errorf("result %s: %w", text(m["result"]), err)
		}
	}
	s.keep(st, m["result"])
	return nil
}

func (s *session) publish(st Step) error {
	subject, err := s.get(st, "publish")
	if err != nil {
		return err
	}
	subj, _ := subject.(string)
	if !strings.HasPrefix(subj, "tenure.in.") {
		return fmt.Errorf("publish: subject %q: want tenure.in.<role>.<actor>.<job>.<verb>", subj)
	}
	body, err := s.get(st, "body")
	if err != nil {
		return err
	}
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	msgID, err := s.get(st, "msg_id")
	if err != nil {
		return err
	}
	id, _ := msgID.(string)
	timeout := s.timeout(st, defaultWait)
	ack, err := s.d.publish(subj, data, id, timeout)
	if err != nil {
		return fmt.Errorf("publish %s: %w", subj, err)
	}
	res := map[string]any{"seq": float64(ack.Sequence), "duplicate": ack.Duplicate, "stream": ack.Stream}
	if want, ok := st.Fields["duplicate"].(bool); ok && want != ack.Duplicate {
		return fmt.Errorf("PubAck %s: want duplicate %v", text(res), want)
	}
	if _, ok := st.Fields["verdict"]; ok {
		p, err := s.get(st, "verdict")
		if err != nil {
			return err
		}
		if str, ok := p.(string); ok {
			kind, reason, _ := strings.Cut(str, "/")
			p = map[string]any{"kind": kind, "reason": reason}
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		e, err := s.d.decisions.wait(ctx, 0, func(e entry) error {
			if !isVerdictOf(e, ack.Sequence) {
				return errSkip
			}
			return match(p, e.v)
		})
		if err != nil {
			return fmt.Errorf("the verdict of input %d: want %s: %w", ack.Sequence, text(p), err)
		}
		res["verdict"] = e.v
	}
	s.keep(st, res)
	return nil
}

func (s *session) await(st Step) error {
	p, err := s.get(st, st.Op)
	if err != nil {
		return err
	}
	m, err := s.since(st)
	if err != nil {
		return err
	}
	var f *feed
	from := 0
	switch st.Op {
	case "await_event":
		name, p, err := s.proc(st)
		if err != nil {
			return err
		}
		f, from = p.events, m.eventsOf(name, s.gens[name])
	case "await_decision":
		f, from = s.d.decisions, m.decisions
	default:
		f, from = s.d.inputs, m.inputs
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout(st, defaultWait))
	defer cancel()
	cand := candidate(p)
	var kept any
	_, err = f.wait(ctx, from, func(e entry) error {
		vs := []any{e.v}
		if st.Op == "await_input" {
			vs = append(vs, batchElements(e.v)...)
		}
		miss := errSkip
		for _, v := range vs {
			if match(cand, v) != nil {
				continue
			}
			if miss = match(p, v); miss == nil {
				kept = v
				return nil
			}
		}
		return miss
	})
	if err != nil {
		return fmt.Errorf("want %s: %w", text(p), err)
	}
	s.keep(st, kept)
	return nil
}

// batchElements are the elements of a batch input (PROTOCOL.md §22.9: a
// subject whose job token is _, a body with an array "leases" or "jobs")
// as the single inputs they stand for: each element's subject names its
// job, its body is the element, and seq and msg_id are the batch's. An
// SDK may send what falls due together as one batch (a queue worker's
// results, say), so await_input matches an element as it would the single
// input of its job. Any other input has none.
func batchElements(v any) []any {
	in, _ := v.(map[string]any)
	subject, _ := in["subject"].(string)
	body, _ := in["body"].(map[string]any)
	toks := strings.Split(subject, ".")
	if len(toks) < 4 || toks[len(toks)-2] != events.NoJob || body == nil {
		return nil
	}
	var elems []any
	for _, k := range []string{"leases", "jobs"} {
		if a, ok := body[k].([]any); ok {
			elems = a
		}
	}
	var out []any
	for _, x := range elems {
		el, ok := x.(map[string]any)
		job, _ := el["job"].(string)
		if !ok || job == "" {
			continue
		}
		t := slices.Clone(toks)
		t[len(t)-2] = job
		out = append(out, map[string]any{"seq": in["seq"], "subject": strings.Join(t, "."), "msg_id": in["msg_id"], "body": el, "batch": subject})
	}
	return out
}

// candidate is the part of a pattern that says what an entry is about
// (an event's name, a decision's kind and job, an input's subject): the
// entries that match it and not the whole pattern are near misses.
func candidate(p any) any {
	m, ok := p.(map[string]any)
	if !ok {
		return nil
	}
	c := map[string]any{}
	for _, k := range []string{"event", "kind", "subject", "job"} {
		if v, ok := m[k]; ok {
			switch x := v.(type) {
			case string:
				c[k] = x
			case map[string]any:
				if id, ok := x["id"].(string); ok {
					c[k] = map[string]any{"id": id}
				}
			}
		}
	}
	return c
}

// expectProjection waits until the latest decision about the job shows a
// projection matching the step's "match".
func (s *session) expectProjection(st Step) error {
	job, err := s.get(st, "expect_projection")
	if err != nil {
		return err
	}
	p, err := s.get(st, "match")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout(st, defaultWait))
	defer cancel()
	_, err = s.d.decisions.wait(ctx, 0, func(e entry) error {
		j, _ := e.v["job"].(map[string]any)
		if j == nil || j["id"] != job {
			return errSkip
		}
		if later := s.latest(job, e.seq); later {
			return errSkip // a later decision about the job is stored
		}
		j = s.reveal(j, e.seq)
		if err := match(p, j); err != nil {
			return fmt.Errorf("decision %d (%s/%s): %w", e.seq, text(e.v["kind"]), text(e.v["reason"]), err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("the projection of %s: want %s: %w", text(job), text(p), err)
	}
	return nil
}

// reveal returns j, the projection of a decision at seq, with the fields
// a decision withholds for need to know (rules revision 5: "withheld",
// the lease id and the payload) taken from the latest earlier decision
// about the same job and generation that carries them, as a reader of the
// whole stream has them (PROTOCOL.md §10.2).
func (s *session) reveal(j map[string]any, seq uint64) map[string]any {
	if j["withheld"] != true {
		return j
	}
	var from map[string]any
	for _, e := range s.d.decisions.snapshot(0) {
		p, _ := e.v["job"].(map[string]any)
		if e.seq < seq && p != nil && p["id"] == j["id"] && p["generation"] == j["generation"] && p["withheld"] != true {
			from = p
		}
	}
	if from == nil {
		return j
	}
	out := make(map[string]any, len(j))
	for k, v := range j {
		if k != "withheld" {
			out[k] = v
		}
	}
	out["lease_id"] = from["lease_id"]
	if pl, ok := from["payload"]; ok {
		out["payload"] = pl
	}
	return out
}

// latest reports whether the runner has read a decision about job after
// decision seq.
func (s *session) latest(job any, seq uint64) bool {
	for _, e := range s.d.decisions.snapshot(0) {
		if j, _ := e.v["job"].(map[string]any); e.seq > seq && j != nil && j["id"] == job {
			return true
		}
	}
	return false
}

func (s *session) expectCount(st Step) error {
	m, err := s.since(st)
	if err != nil {
		return err
	}
	p, err := s.get(st, "match")
	if err != nil {
		return err
	}
	want, _ := st.Fields["count"].(float64)
	var es []entry
	switch st.Fields["expect_count"] {
	case "events":
		name, p, err := s.proc(st)
		if err != nil {
			return err
		}
		es = p.events.snapshot(m.eventsOf(name, s.gens[name]))
	case "decisions":
		es = s.d.decisions.snapshot(m.decisions)
	case "inputs":
		es = s.d.inputs.snapshot(m.inputs)
	default:
		return errors.New(`expect_count: want "events", "decisions" or "inputs"`)
	}
	var seen []string
	for _, e := range es {
		if match(p, e.v) == nil {
			seen = append(seen, text(e.v))
		}
	}
	if float64(len(seen)) != want {
		return fmt.Errorf("%d %s match %s, want %v: %s", len(seen), st.Fields["expect_count"], text(p), want, strings.Join(seen, "; "))
	}
	return nil
}

func (s *session) expectOrder(st Step) error {
	v, err := s.get(st, "expect_order")
	if err != nil {
		return err
	}
	vs, ok := v.([]any)
	if !ok || len(vs) < 2 {
		return errors.New("expect_order: want two times or more")
	}
	strict, _ := st.Fields["strict"].(bool)
	prev, err := instant(vs[0])
	if err != nil {
		return err
	}
	for _, x := range vs[1:] {
		t, err := instant(x)
		if err != nil {
			return err
		}
		if t.Before(prev) || strict && t.Equal(prev) {
			return fmt.Errorf("%s is after %s: want them in order", prev.UTC().Format(time.RFC3339Nano), t.UTC().Format(time.RFC3339Nano))
		}
		prev = t
	}
	return nil
}

func (s *session) expectNewerToken(st Step) error {
	v, err := s.get(st, "expect_newer_token")
	if err != nil {
		return err
	}
	m, _ := v.(map[string]any)
	olderS, _ := m["older"].(string)
	newerS, _ := m["newer"].(string)
	older, err := parseToken(olderS)
	if err != nil {
		return err
	}
	newer, err := parseToken(newerS)
	if err != nil {
		return err
	}
	switch {
	case older.job != newer.job:
		return fmt.Errorf("tokens %s and %s name different jobs", olderS, newerS)
	case newer.gen <= older.gen:
		return fmt.Errorf("token %s: generation not above %s's", newerS, olderS)
	case newer.leaseSeq <= older.leaseSeq:
		return fmt.Errorf("token %s: lease id sequence not above %s's", newerS, olderS)
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

func describeEvents(es []entry) string {
	var b strings.Builder
	for _, e := range es {
		fmt.Fprintf(&b, "  %s\n", text(e.v))
	}
	return b.String()
}

// describeDecisions renders decisions one line each: sequence, cause,
// kind/reason, addressee, and the job's id, generation, holder and state.
func describeDecisions(es []entry) string {
	var b strings.Builder
	for _, e := range es {
		j, _ := e.v["job"].(map[string]any)
		fmt.Fprintf(&b, "  #%d cause %s %s/%s to %s: job %s gen %s holder %s %s\n", e.seq, text(e.v["cause"]),
			text(e.v["kind"]), text(e.v["reason"]), text(e.v["addressee"]),
			text(j["id"]), text(j["generation"]), text(j["holder"]), text(j["state"]))
	}
	return b.String()
}
