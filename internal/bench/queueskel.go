package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The skeleton of Tenure's job path (issue 31: what limits the queue with
// sync interval, measured rather than argued). Raw JetStream carries the
// messages a Tenure job makes and does nothing else: no fold, no
// validation, no lease, no chain, no SDK. Its messages are shaped after
// the ones the Tenure run of the same scenario stored just before
// (captureQueueShapes): each decision's body and headers as stored, each
// input's headers and its bytes per job. Per job, as Tenure:
//
//   - the dispatcher publishes a submit input carrying the jobs whose slots
//     freed meanwhile (up to events.MaxBatch; queueDispatchers calls at
//     once), and waits for the PubAck and for each job's `submitted`
//     decision, as ops.SubmitMany does;
//   - a relay, the coordinator's stand-in, reads the inputs in stream order
//     and appends one decision per job and step, each a single message
//     with its own message id and expected last sequence, pipelined as the
//     coordinator's appender appends them with sync interval: `submitted`
//     to the dispatcher, `assigned` to the worker with the most free slots
//     (each worker has QueueConcurrency), `acked` for an ack input,
//     `completed` for a result input (which frees the slot);
//   - each worker reads its decisions through one ordered consumer, and
//     answers all it has read with at most one ack input and one result
//     input (up to events.MaxBatch jobs each): an `assigned` job is acked; an
//     `acked` one starts its (empty) handler, which is when its start
//     latency is taken, and is reported; a `completed` one is done.
//
// So the skeleton stores and delivers what Tenure stores and delivers per
// job (a job's four decisions, and its share of the batched inputs; not
// the workers' capacity announcements, which it has no use for), in the
// same order and with the same dependencies: a job's start waits for the
// same four writes in series. Its throughput is what the message design
// leaves Tenure's code at most, its start latency the least the design
// allows; it is lenient where it differs (no limit on a worker's inputs
// in flight, where Run keeps at most four of each verb). It appends one
// message at a time, as Tenure's appender does with sync interval (with
// sync always Tenure groups its appends into atomic batches, which the
// skeleton does not: there it is no ceiling).
//
// Grouped, the relay appends the decisions that one input makes for one
// addressee, of one kind, as one message (its body names the jobs): a
// design Tenure does not have (a decision is one job's), measured for
// what it would leave.

// queueShapes are the templates of the skeleton's messages, taken from a
// Tenure run.
type queueShapes struct {
	out map[events.Kind]*nats.Msg // one decision of each of skelKinds, as stored
	in  map[events.Verb]inShape   // the inputs of each of skelVerbs
	mix string                    // the inputs scanned, by verb
}

// inShape is the shape of one verb's inputs: the headers of the last one
// stored, and the bytes of body per job over those scanned.
type inShape struct {
	header nats.Header
	perJob int
}

var (
	skelKinds = []events.Kind{events.KindSubmitted, events.KindAssigned, events.KindAcked, events.KindCompleted}
	skelVerbs = []events.Verb{events.VerbSubmit, events.VerbAck, events.VerbResult}
)

// shapesScan bounds how many of each stream's last messages the capture
// reads.
const shapesScan = 4000

// captureQueueShapes reads the last messages of a Tenure run's streams: a
// decision of each of skelKinds, and the inputs of each of skelVerbs.
func captureQueueShapes(ctx context.Context, js jetstream.JetStream, top streams.Topology) (*queueShapes, error) {
	qs := &queueShapes{out: map[events.Kind]*nats.Msg{}, in: map[events.Verb]inShape{}}
	err := scanBack(ctx, js, top.DecisionStream(), shapesScan, func(m *nats.Msg) bool {
		if k, ok := events.ParseKind(m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]); ok && qs.out[k] == nil {
			for _, want := range skelKinds {
				if k == want {
					qs.out[k] = m
				}
			}
		}
		return len(qs.out) == len(skelKinds)
	})
	if err != nil {
		return nil, err
	}
	for _, k := range skelKinds {
		if qs.out[k] == nil {
			return nil, fmt.Errorf("no %s decision among the last %d decisions", k, shapesScan)
		}
	}
	type sum struct {
		header              nats.Header
		bytes, jobs, inputs int
	}
	sums := map[events.Verb]*sum{}
	err = scanBack(ctx, js, top.InputStream(), shapesScan, func(m *nats.Msg) bool {
		s, err := events.ParseInputSubject(m.Subject)
		if err != nil {
			return false
		}
		jobs := 1
		if s.Job == events.NoJob {
			jobs = max(1, bytes.Count(m.Data, []byte(`"job":`)))
		}
		x := sums[s.Verb]
		if x == nil {
			x = &sum{header: m.Header}
			sums[s.Verb] = x
		}
		x.bytes += len(m.Data)
		x.jobs += jobs
		x.inputs++
		return false
	})
	if err != nil {
		return nil, err
	}
	for _, v := range skelVerbs {
		x := sums[v]
		if x == nil {
			return nil, fmt.Errorf("no %s input among the last %d inputs", v, shapesScan)
		}
		qs.in[v] = inShape{header: x.header, perJob: x.bytes / x.jobs}
	}
	var mix []string
	for v := events.Verb(1); v.String() != "?" && v < 64; v++ {
		if x := sums[v]; x != nil {
			mix = append(mix, fmt.Sprintf("%s %d (%d jobs, %d bytes each)", v, x.inputs, x.jobs, x.bytes/x.jobs))
		}
	}
	qs.mix = strings.Join(mix, ", ")
	return qs, nil
}

// scanBack calls fn with the messages of stream from its last one back,
// as stored (without the headers of the get), until fn says it has what
// it wanted or limit messages were read.
func scanBack(ctx context.Context, js jetstream.JetStream, stream string, limit uint64, fn func(*nats.Msg) bool) error {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return err
	}
	for seq := info.State.LastSeq; seq > 0 && seq+limit > info.State.LastSeq; seq-- {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			return fmt.Errorf("%s message %d: %w", stream, seq, err)
		}
		if fn(storedMsg(m)) {
			return nil
		}
	}
	return nil
}

// storedMsg is a message got from a stream as it was stored: the get's
// own headers (Nats-Stream, Nats-Sequence, Nats-Subject, Nats-Time-Stamp
// ...) are not the message's.
func storedMsg(m *jetstream.RawStreamMsg) *nats.Msg {
	stored := nats.Header{}
	for k, v := range m.Header {
		switch k {
		case "Nats-Stream", "Nats-Sequence", "Nats-Subject", "Nats-Time-Stamp", "Nats-Last-Sequence", "Nats-Num-Pending":
		default:
			stored[k] = v
		}
	}
	return &nats.Msg{Subject: m.Subject, Data: m.Data, Header: stored}
}

// Subjects of the skeleton: inputs skel.in.<actor>.<verb> carrying job
// ids, decisions skel.out.<actor>.<job>.<kind>.
const (
	skelIn  = "skel.in."
	skelOut = "skel.out."
)

// The skeleton's streams.
const (
	skelInStream  = "SKEL_IN"
	skelOutStream = "SKEL_OUT"
)

// skelInput is an input of actor's carrying jobs, shaped as sh: its
// headers (its own message id, its stream expected, no other
// expectation), a body of the job ids
// padded to sh's bytes per job.
func skelInput(actor string, verb events.Verb, jobs []string, sh inShape, id uint64) *nats.Msg {
	body := skelBody(jobs, sh.perJob)
	h := make(nats.Header, len(sh.header))
	for k, v := range sh.header {
		switch k {
		case "Nats-Msg-Id":
			h[k] = []string{actor + "-" + strconv.FormatUint(id, 10)}
		case "Nats-Expected-Stream":
			h[k] = []string{skelInStream}
		case "Nats-Expected-Last-Sequence", "Nats-Expected-Last-Subject-Sequence", "Nats-Batch-Id", "Nats-Batch-Sequence", "Nats-Batch-Commit":
		default:
			h[k] = v
		}
	}
	return &nats.Msg{Subject: skelIn + actor + "." + verb.String(), Header: h, Data: body}
}

// skelBody is the body of a message carrying jobs: their ids, padded to
// perJob bytes per job.
func skelBody(jobs []string, perJob int) []byte {
	body := []byte(strings.Join(jobs, ","))
	for len(body) < len(jobs)*perJob {
		body = append(body, ' ')
	}
	return body
}

// skelJobs are the job ids a message of the skeleton carries.
func skelJobs(data []byte) []string {
	return strings.Split(string(bytes.TrimRight(data, " ")), ",")
}

// skelRelay is the coordinator's stand-in: one goroutine, the relay's
// loop, owns it.
type skelRelay struct {
	publish func(*nats.Msg) error // appends, pipelined
	shapes  *queueShapes
	last    uint64 // messages appended
	workers []string
	free    []int    // free slots per worker
	ready   []string // submitted, not yet assigned, oldest first
	// grouped: the decisions of one input to one addressee of one kind
	// leave as one message (a design Tenure does not have: what it
	// would leave); groups holds them until the input's end.
	grouped bool
	groups  []skelGroup
}

// skelGroup is the decisions of kind to actor about jobs, in one message.
type skelGroup struct {
	actor string
	kind  events.Kind
	jobs  []string
}

// decide appends the decision of kind about job to actor, or adds it to
// its group.
func (r *skelRelay) decide(actor, job string, kind events.Kind) error {
	if r.grouped {
		for i := range r.groups {
			if g := &r.groups[i]; g.actor == actor && g.kind == kind {
				g.jobs = append(g.jobs, job)
				return nil
			}
		}
		r.groups = append(r.groups, skelGroup{actor: actor, kind: kind, jobs: []string{job}})
		return nil
	}
	tmpl := r.shapes.out[kind]
	m := &nats.Msg{Subject: skelOut + actor + "." + job + "." + kind.String(), Header: shapedHeader(tmpl.Header, r.last), Data: tmpl.Data}
	r.last++
	return r.publish(m)
}

// flush appends the groups of the input: one message each, subject
// skel.out.<actor>._.<kind>, its body the job ids padded to the bytes of
// as many decisions.
func (r *skelRelay) flush() error {
	for _, g := range r.groups {
		tmpl := r.shapes.out[g.kind]
		m := &nats.Msg{Subject: skelOut + g.actor + "._." + g.kind.String(), Header: shapedHeader(tmpl.Header, r.last),
			Data: skelBody(g.jobs, len(tmpl.Data))}
		r.last++
		if err := r.publish(m); err != nil {
			return err
		}
	}
	r.groups = r.groups[:0]
	return nil
}

// input handles one input of the skeleton, in stream order.
func (r *skelRelay) input(subject string, data []byte) error {
	rest, ok := strings.CutPrefix(subject, skelIn)
	actor, verb, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 {
		return fmt.Errorf("skeleton: input on %s", subject)
	}
	w := -1
	for i, name := range r.workers {
		if name == actor {
			w = i
		}
	}
	for _, job := range skelJobs(data) {
		var err error
		switch verb {
		case events.VerbSubmit.String():
			r.ready = append(r.ready, job)
			err = r.decide(actor, job, events.KindSubmitted)
		case events.VerbAck.String():
			err = r.decide(actor, job, events.KindAcked)
		case events.VerbResult.String():
			if w < 0 {
				return fmt.Errorf("skeleton: a result from %s", actor)
			}
			r.free[w]++
			err = r.decide(actor, job, events.KindCompleted)
		default:
			return fmt.Errorf("skeleton: input on %s", subject)
		}
		if err != nil {
			return err
		}
	}
	// Match: the next ready job to the worker with the most free slots.
	for len(r.ready) > 0 {
		best := 0
		for i := range r.free {
			if r.free[i] > r.free[best] {
				best = i
			}
		}
		if r.free[best] == 0 {
			break
		}
		r.free[best]--
		job := r.ready[0]
		r.ready = r.ready[1:]
		if err := r.decide(r.workers[best], job, events.KindAssigned); err != nil {
			return err
		}
	}
	return r.flush()
}

// skelDecision is a message of the skeleton's decisions as its addressee
// reads it: one job's, or a group's.
type skelDecision struct {
	jobs []string
	kind string
}

// parseSkelDecision splits skel.out.<actor>.<job>.<kind>; a group's job
// token is _ and its jobs are in its body.
func parseSkelDecision(subject string, data []byte) (skelDecision, bool) {
	t := strings.Split(subject, ".")
	if len(t) != 5 {
		return skelDecision{}, false
	}
	if t[3] == events.NoJob {
		return skelDecision{jobs: skelJobs(data), kind: t[4]}, true
	}
	return skelDecision{jobs: []string{t[3]}, kind: t[4]}, true
}

// skeletonQueue runs the skeleton with inflight jobs in the loop.
func (b *runner) skeletonQueue(ctx context.Context, inflight int, qs *queueShapes, grouped bool) (queueLoad, error) {
	if qs == nil {
		return queueLoad{}, errors.New("no shapes: the Tenure run that takes them did not run")
	}
	name := "queue-skeleton"
	if grouped {
		name += "-grouped"
	}
	srv, err := b.startServer(b.newDir(name), false)
	if err != nil {
		return queueLoad{}, err
	}
	defer srv.Shutdown()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var failed atomic.Value
	fail := func(err error) {
		if cctx.Err() == nil {
			failed.CompareAndSwap(nil, err)
		}
	}
	ncR, err := connect(srv.ClientURL(), "bench-skeleton-relay")
	if err != nil {
		return queueLoad{}, err
	}
	defer ncR.Close()
	jsR, err := asyncJS(ncR, 4096, &failed)
	if err != nil {
		return queueLoad{}, err
	}
	in, err := jsR.CreateStream(ctx, baselineStream(skelInStream, skelIn+">"))
	if err != nil {
		return queueLoad{}, err
	}
	outCfg := streams.Topology{Prefix: "SKEL"}.DecisionConfig()
	outCfg.Name, outCfg.Subjects, outCfg.Description = skelOutStream, []string{skelOut + ">"}, "tenure bench skeleton"
	out, err := jsR.CreateStream(ctx, outCfg)
	if err != nil {
		return queueLoad{}, err
	}
	stop := b.profile(name + profileSuffix(inflight))
	defer stop()

	l := &loadWindow{}
	tokens := make(chan struct{}, inflight)
	for range inflight {
		tokens <- struct{}{}
	}
	var sent sync.Map // job id -> the time its submit was published
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	// follow reads the decisions of actor in order, calling fn with each.
	follow := func(js jetstream.JetStream, actor string, fn func(skelDecision)) error {
		cons, err := js.OrderedConsumer(cctx, out.CachedInfo().Config.Name, jetstream.OrderedConsumerConfig{FilterSubjects: []string{skelOut + actor + ".>"}})
		if err != nil {
			return err
		}
		it, err := cons.Messages()
		if err != nil {
			return err
		}
		context.AfterFunc(cctx, it.Stop) // Next returns once stopped
		wg.Go(func() {
			for {
				m, err := it.Next()
				if err != nil {
					return
				}
				d, ok := parseSkelDecision(m.Subject(), m.Data())
				if !ok {
					fail(fmt.Errorf("skeleton: a decision on %s", m.Subject()))
					return
				}
				fn(d)
			}
		})
		return nil
	}

	// The relay.
	rel := &skelRelay{shapes: qs, grouped: grouped, publish: func(m *nats.Msg) error {
		_, err := jsR.PublishMsgAsync(m, jetstream.WithStallWait(30*time.Second))
		return err
	}}
	for i := range b.cfg.QueueWorkers {
		rel.workers = append(rel.workers, "w"+strconv.Itoa(i))
		rel.free = append(rel.free, b.cfg.QueueConcurrency)
	}
	inCons, err := jsR.OrderedConsumer(cctx, in.CachedInfo().Config.Name, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return queueLoad{}, err
	}
	inIt, err := inCons.Messages()
	if err != nil {
		return queueLoad{}, err
	}
	context.AfterFunc(cctx, inIt.Stop)
	wg.Go(func() {
		for {
			m, err := inIt.Next()
			if err != nil {
				return
			}
			if err := rel.input(m.Subject(), m.Data()); err != nil {
				fail(err)
				return
			}
		}
	})

	// The workers.
	for _, actor := range rel.workers {
		nc, err := connect(srv.ClientURL(), "bench-skeleton-"+actor)
		if err != nil {
			return queueLoad{}, err
		}
		defer nc.Close()
		js, err := asyncJS(nc, 4096, &failed)
		if err != nil {
			return queueLoad{}, err
		}
		read := make(chan skelDecision, 4*b.cfg.QueueConcurrency)
		if err := follow(js, actor, func(d skelDecision) {
			select {
			case read <- d:
			case <-cctx.Done():
			}
		}); err != nil {
			return queueLoad{}, err
		}
		wg.Go(func() {
			var acks, results []string
			var n uint64
			send := func(verb events.Verb, jobs []string) error {
				for len(jobs) > 0 {
					k := min(len(jobs), events.MaxBatch)
					n++
					if _, err := js.PublishMsgAsync(skelInput(actor, verb, jobs[:k], qs.in[verb], n), jetstream.WithStallWait(30*time.Second)); err != nil {
						return err
					}
					jobs = jobs[k:]
				}
				return nil
			}
			handle := func(d skelDecision) {
				for _, job := range d.jobs {
					switch d.kind {
					case events.KindAssigned.String():
						acks = append(acks, job)
					case events.KindAcked.String():
						if t, ok := sent.Load(job); ok {
							l.started(t.(time.Time))
						}
						results = append(results, job) // the empty handler's SUCCESS
					case events.KindCompleted.String():
						sent.Delete(job)
						l.done.Add(1)
						select {
						case tokens <- struct{}{}:
						default:
						}
					}
				}
			}
			for {
				select {
				case d := <-read:
					handle(d)
				case <-cctx.Done():
					return
				}
				for more := true; more; { // all that was read meanwhile
					select {
					case d := <-read:
						handle(d)
					default:
						more = false
					}
				}
				if err := send(events.VerbAck, acks); err != nil {
					fail(err)
					return
				}
				if err := send(events.VerbResult, results); err != nil {
					fail(err)
					return
				}
				acks, results = acks[:0], results[:0]
			}
		})
	}

	// The dispatcher: its verdicts through one reader; a call waits for the
	// PubAck and for the submitted verdict of each of its jobs.
	ncD, err := connect(srv.ClientURL(), "bench-skeleton-dispatcher")
	if err != nil {
		return queueLoad{}, err
	}
	defer ncD.Close()
	jsD, err := jetstream.New(ncD)
	if err != nil {
		return queueLoad{}, err
	}
	var calls sync.Map // call id -> chan struct{}, closed when its verdicts are read
	var left sync.Map  // call id -> *atomic.Int64, verdicts still to read
	if err := follow(jsD, "disp", func(d skelDecision) {
		for _, job := range d.jobs {
			call, _, _ := strings.Cut(job, "-")
			if n, ok := left.Load(call); ok && n.(*atomic.Int64).Add(-1) == 0 {
				if c, ok := calls.Load(call); ok {
					close(c.(chan struct{}))
				}
			}
		}
	}); err != nil {
		return queueLoad{}, err
	}
	var nextCall atomic.Uint64
	for range min(queueDispatchers, inflight) {
		wg.Go(func() {
			for {
				select {
				case <-tokens:
				case <-cctx.Done():
					return
				}
				n := freedSlots(tokens)
				id := nextCall.Add(1)
				call := strconv.FormatUint(id, 10)
				jobs := make([]string, n)
				now := time.Now()
				for i := range jobs {
					jobs[i] = call + "-" + strconv.Itoa(i)
					sent.Store(jobs[i], now)
				}
				c := make(chan struct{})
				var k atomic.Int64
				k.Store(int64(n))
				calls.Store(call, c)
				left.Store(call, &k)
				if _, err := jsD.PublishMsg(cctx, skelInput("disp", events.VerbSubmit, jobs, qs.in[events.VerbSubmit], id)); err != nil {
					fail(err)
					return
				}
				select {
				case <-c:
				case <-cctx.Done():
					return
				}
				calls.Delete(call)
				left.Delete(call)
			}
		})
	}

	// Durable writes: the inputs and the decisions stored.
	counts := func() (queueCounts, error) {
		i, err := lastSeq(ctx, jsR, skelInStream)
		if err != nil {
			return queueCounts{}, err
		}
		d, err := lastSeq(ctx, jsR, skelOutStream)
		if err != nil {
			return queueCounts{}, err
		}
		return queueCounts{writes: i + d, inputs: i, decisions: d, appends: d}, nil
	}
	res, err := b.runWindow(ctx, l, counts)
	cancel()
	if e, ok := failed.Load().(error); ok && err == nil {
		err = e
	}
	return res, err
}
