package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/embedded"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/projector"
	"github.com/maknow/tenure/streams"
)

var demoCmd = &command{
	name:    "demo",
	summary: "play the seeds' decisive scenarios live and print the evidence matrix",
	usage:   "tenure demo [flags]",
	help: `Starts an embedded nats-server and a coordinator in a temporary directory
(or --data, or uses --nats-url), plays the decisive scenarios of Tenure's
specification live with synthetic workers (offer and ACK, renewal, expiry,
stale generations, late progress, cancellation, ownership conflicts,
competing acquires...), and prints every decision as it comes and then the
evidence matrix of every job. Exit status 0 only if every scenario ended as
the specification requires.`,
	run: runDemo,
}

// runDemo starts an embedded server and a coordinator in a temporary
// directory (or --data, or uses --nats-url), plays the decisive scenarios of
// seed 000 §14 and seed 004 live with synthetic workers, and prints the
// evidence matrix. Exit status 0 only if every scenario ended as the seeds
// require. Its output names no document outside the repository (the seeds
// are not in it) and fits a terminal of 120 columns.
func runDemo(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	var conn connFlags
	conn.register(fs, "run the scenarios against this NATS server (with a coordinator of its own) instead of an embedded one")
	data := fs.String("data", "", "keep the embedded server's log in this directory (to audit it afterwards); default a temporary one")
	format := fs.String("format", "blocks", "evidence matrix format: blocks (one job per block, 120 columns), table (one job a line, wide), csv or json")
	if err := parse(fs, args); err != nil {
		return err
	}
	// With --format csv or json stdout is the matrix alone, for a program
	// to read; the story and the verdicts go to stderr.
	matrix := stdout
	switch projector.Format(*format) {
	case projector.FormatCSV, projector.FormatJSON:
		stdout = stderr
	}
	log := slog.New(slog.DiscardHandler)
	if conn.url == "" {
		dir := *data
		if dir == "" {
			tmp, err := os.MkdirTemp("", "tenure-demo-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(tmp)
			dir = tmp
		}
		fmt.Fprintf(stdout, "starting an embedded nats-server and a coordinator in %s...\n", dir)
		srv, err := embedded.Start(embedded.Config{DataDir: dir, Port: -1, SyncAlways: true, ServerName: "tenure-demo"})
		if err != nil {
			return dataDirInUse(err, "give the demo another --data directory")
		}
		defer srv.Shutdown()
		conn.url = srv.ClientURL()
		fmt.Fprintf(stdout, "embedded nats-server at %s, log in %s\n", conn.url, dir)

		cnc, err := conn.connect("tenure-demo-coordinator")
		if err != nil {
			return err
		}
		defer cnc.Close()
		c, err := coordinator.New(coordinator.Config{ID: "demo", Conn: cnc, LeaderTTL: time.Second, Logger: log})
		if err != nil {
			return err
		}
		cctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Run(cctx); err != nil {
				fmt.Fprintln(stderr, "coordinator:", err)
			}
		}()
		defer func() { cancel(); wg.Wait() }()
		for !c.Stats().Live {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	nc, err := conn.connect("tenure-demo")
	if err != nil {
		return err
	}
	defer nc.Close()
	d, err := newDemo(ctx, nc, stdout)
	if err != nil {
		return err
	}
	run := fmt.Sprintf("%04x", time.Now().UnixMilli()%0x10000) // job ids apart between runs on a shared server
	if err := d.explainBefore(ctx); err != nil {
		return err
	}
	scenarios := []struct {
		name string
		play func(ctx context.Context, run string) (string, error)
	}{
		{"a paused scheduler resumes after a newer epoch was granted", d.pausedScheduler},
		{"an expired generation renews after the next one is active", d.lateRenewal},
		{"progress 12 arrives after 14", d.reorderedProgress},
		{"cancellation during a disconnect, then late progress", d.cancelDuringDisconnect},
		{"ACK without a terminal result", d.ackWithoutResult},
	}
	var verdicts []string
	failed := 0
	for i, s := range scenarios {
		fmt.Fprintf(stdout, "\n== %d. %s\n", i+1, s.name)
		d.header()
		summary, err := s.play(ctx, run)
		mark := "PASS"
		if err != nil {
			mark, summary = "FAIL", err.Error()
			failed++
		}
		verdicts = append(verdicts, fmt.Sprintf("%s  %d. %s\n        %s", mark, i+1, s.name, summary))
	}
	latest := projector.LatestByJob(d.decisions())
	opts := projector.MatrixOptions{}
	if f := projector.Format(*format); f == projector.FormatBlocks && len(latest) > 0 {
		// Times of day to the millisecond; the date once.
		opts.TimeLayout = "15:04:05.000"
		fmt.Fprintf(stdout, "\n== Evidence matrix: each job after its latest decision (times UTC, %s; fields: PROTOCOL.md §10.2)\n\n",
			time.Unix(0, latest[0].At).UTC().Format(time.DateOnly))
	} else {
		fmt.Fprintln(stdout, "\n== Evidence matrix: each job after its latest decision")
	}
	if err := projector.WriteMatrix(matrix, projector.Format(*format), latest, opts); err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	for _, v := range verdicts {
		fmt.Fprintln(stdout, v)
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d scenarios did not end as the protocol requires", failed, len(scenarios))
	}
	fmt.Fprintf(stdout, "all %d scenarios ended as the protocol requires (PROTOCOL.md §7, §13)\n", len(scenarios))
	return nil
}

// demo publishes inputs as any actor (a bare wire-protocol client, so it can
// also misbehave: replay old generations, reorder sequences) and collects
// every decision about the demo's jobs.
type demo struct {
	js      jetstream.JetStream
	out     io.Writer
	inputs  jetstream.Stream // to explain the input numbers no decision line shows
	printed uint64           // the highest input number shown or explained

	mu      sync.Mutex
	cond    *sync.Cond
	all     []events.Decision
	byCause map[uint64][]events.Decision
}

func newDemo(ctx context.Context, nc *nats.Conn, out io.Writer) (*demo, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	d := &demo{js: js, out: out, byCause: map[uint64][]events.Decision{}}
	d.cond = sync.NewCond(&d.mu)
	if d.inputs, err = js.Stream(ctx, streams.Topology{}.InputStream()); err != nil {
		return nil, fmt.Errorf("demo: %w", streams.Classify(err))
	}
	stream, err := js.Stream(ctx, streams.Topology{}.DecisionStream())
	if err != nil {
		return nil, fmt.Errorf("demo: %w", streams.Classify(err))
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, err
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: info.State.LastSeq + 1,
	})
	if err != nil {
		return nil, err
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		dec, err := events.DecodeDecision(m.Data())
		if err != nil {
			return
		}
		d.mu.Lock()
		d.all = append(d.all, dec)
		d.byCause[dec.Cause] = append(d.byCause[dec.Cause], dec)
		d.mu.Unlock()
		d.cond.Broadcast()
	})
	if err != nil {
		return nil, err
	}
	go func() { <-ctx.Done(); cc.Stop(); d.cond.Broadcast() }()
	return d, nil
}

func (d *demo) decisions() []events.Decision {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]events.Decision(nil), d.all...)
}

// send publishes one input and returns its verdict (and prints every
// decision it caused).
func (d *demo) send(ctx context.Context, role events.Role, actor, job string, verb events.Verb, body string) (events.Decision, error) {
	msg := nats.NewMsg(events.InputSubject(role, actor, job, verb))
	msg.Data = []byte(body)
	ack, err := d.js.PublishMsg(ctx, msg, jetstream.WithMsgID(actor+"-"+uuid.NewString()))
	if err != nil {
		return events.Decision{}, fmt.Errorf("publish %s: %w", verb, err)
	}
	ds, err := d.wait(ctx, func() []events.Decision {
		if got := d.byCause[ack.Sequence]; len(got) > 0 && int(got[0].Of) == len(got) {
			return got
		}
		return nil
	})
	if err != nil {
		return events.Decision{}, err
	}
	var v events.Decision
	for i := range ds {
		d.print(&ds[i])
		if !ds[i].Kind.Derived() {
			v = ds[i]
		}
	}
	return v, nil
}

// await waits for a time-derived decision about job (expired, ack_missed,
// unresolved) and prints it.
func (d *demo) await(ctx context.Context, job string, kind events.Kind) (events.Decision, error) {
	ds, err := d.wait(ctx, func() []events.Decision {
		for _, x := range d.all {
			if x.Job.ID == job && x.Kind == kind {
				return []events.Decision{x}
			}
		}
		return nil
	})
	if err != nil {
		return events.Decision{}, fmt.Errorf("waiting for %s of %s: %w", kind, job, err)
	}
	d.print(&ds[0])
	return ds[0], nil
}

func (d *demo) wait(ctx context.Context, found func() []events.Decision) ([]events.Decision, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	stop := context.AfterFunc(ctx, d.cond.Broadcast)
	defer stop()
	d.mu.Lock()
	defer d.mu.Unlock()
	for {
		if ds := found(); ds != nil {
			return append([]events.Decision(nil), ds...), nil
		}
		if ctx.Err() != nil {
			return nil, errors.New("no verdict (is a coordinator running?)")
		}
		d.cond.Wait()
	}
}

// The columns of a decision line: 116 characters with the demo's ids.
const demoLine = "  %-12s  %-6s %-16s %-27s %-22s %-12s %-3s %s\n"

// header labels the columns of the decision lines.
func (d *demo) header() {
	fmt.Fprintf(d.out, demoLine, "TIME (UTC)", "INPUT", "DECISION", "REASON", "FROM, VERB", "JOB", "GEN", "STATE")
}

// print shows decision x on one line (its detail, if any, on the next),
// after a line for every input number since the last one shown that no
// decision line shows.
func (d *demo) print(x *events.Decision) {
	d.explain(x.Cause)
	d.printed = max(d.printed, x.Cause)
	input := "#" + strconv.FormatUint(x.Cause, 10)
	if x.N > 0 {
		input += "." + strconv.FormatUint(uint64(x.N), 10)
	}
	gen := "-"
	if x.Job.Generation > 0 {
		gen = strconv.FormatUint(x.Job.Generation, 10)
	}
	fmt.Fprintf(d.out, demoLine, time.Unix(0, x.At).UTC().Format("15:04:05.000"), input, x.Kind, x.Reason,
		x.Role.String()+"/"+x.Actor+" "+x.Verb.String(), x.Job.ID, gen, x.Job.State)
	if x.Detail != "" {
		fmt.Fprintf(d.out, "  %-12s  %-6s %s\n", "", "", x.Detail)
	}
}

// explainBefore says what the inputs stored before the demo began are.
func (d *demo) explainBefore(ctx context.Context) error {
	info, err := d.inputs.Info(ctx)
	if err != nil {
		return fmt.Errorf("demo: %w", streams.Classify(err))
	}
	if info.State.LastSeq > 0 {
		fmt.Fprintln(d.out, "\nInputs before the scenarios:")
		d.explain(info.State.LastSeq + 1)
	}
	return nil
}

// explain prints a line for each input number after the last one shown and
// before next, saying what that input is and why no decision line shows it.
func (d *demo) explain(next uint64) {
	const most = 10 // then one line for the rest (a shared server's history)
	from := d.printed + 1
	if next <= from {
		return
	}
	d.printed = next - 1
	for seq := from; seq < next; seq++ {
		if seq-from == most {
			fmt.Fprintf(d.out, "  #%d to #%d: %d more inputs stored by others, not part of the scenarios\n", seq, next-1, next-seq)
			return
		}
		fmt.Fprintf(d.out, "  #%-5d %s\n", seq, d.whatInput(seq))
	}
}

// whatInput says what input seq is, from its subject.
func (d *demo) whatInput(seq uint64) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := d.inputs.GetMsg(ctx, seq)
	if err != nil {
		return "not read (" + err.Error() + ")"
	}
	sub, err := events.ParseInputSubject(m.Subject)
	if err != nil {
		return m.Subject + ": not an input subject"
	}
	who := sub.Role.String() + "/" + sub.Actor + " " + sub.Verb.String() + ": "
	switch {
	case sub.Role == events.RoleCoord && sub.Verb == events.VerbRules:
		return who + "the coordinator's first input on an empty log: the rules revision and the log's lease key"
	case sub.Role == events.RoleCoord && sub.Verb == events.VerbPolicy:
		return who + "the protocol's default policy, which the coordinator appends to an empty log"
	case sub.Verb == events.VerbTick:
		return who + "the coordinator's clock tick; nothing about the scenarios' jobs fell due at it"
	case sub.Verb == events.VerbCheckpoint:
		return who + "the coordinator anchors a snapshot's state hash"
	}
	return who + "another client's input, not part of the scenarios"
}

// expect checks a verdict's kind and reason.
func expect(v events.Decision, kind events.Kind, reason events.Reason) error {
	if v.Kind != kind || v.Reason != reason {
		return fmt.Errorf("#%d %s: got %s/%s, the seeds require %s/%s", v.Cause, v.Verb, v.Kind, v.Reason, kind, reason)
	}
	return nil
}

func leaseRef(v events.Decision) string {
	return fmt.Sprintf(`"lease_id":%q,"generation":%d`, v.Job.LeaseID, v.Job.Generation)
}

const (
	worker = events.RoleWorker
	op     = events.RoleOps
)

func (d *demo) pausedScheduler(ctx context.Context, run string) (string, error) {
	job := "planner-" + run
	a, err := d.send(ctx, worker, "sched-a", job, events.VerbAcquire, `{"v":1,"lease_ms":600}`)
	if err != nil {
		return "", err
	}
	if err := expect(a, events.KindGranted, events.ReasonOk); err != nil {
		return "", err
	}
	if v, err := d.send(ctx, worker, "sched-b", job, events.VerbAcquire, `{"v":1,"lease_ms":600}`); err != nil || expect(v, events.KindRejected, events.ReasonLeaseHeld) != nil {
		return "", errors.Join(err, expect(v, events.KindRejected, events.ReasonLeaseHeld))
	}
	fmt.Fprintln(d.out, "  sched-a pauses (GC, SIGSTOP, VM migration) for longer than its lease...")
	if _, err := d.await(ctx, job, events.KindExpired); err != nil {
		return "", err
	}
	b, err := d.send(ctx, worker, "sched-b", job, events.VerbAcquire, `{"v":1,"lease_ms":5000}`)
	if err != nil {
		return "", err
	}
	if err := expect(b, events.KindGranted, events.ReasonOk); err != nil {
		return "", err
	}
	fmt.Fprintln(d.out, "  sched-a resumes and renews its old epoch...")
	v, err := d.send(ctx, worker, "sched-a", job, events.VerbRenew, `{"v":1,`+leaseRef(a)+`,"renew_seq":1}`)
	if err != nil {
		return "", err
	}
	if err := expect(v, events.KindLostAuthority, events.ReasonStaleGeneration); err != nil {
		return "", err
	}
	if v.Job.Holder != "sched-b" || v.Job.ExpiresAt != b.Job.ExpiresAt {
		return "", fmt.Errorf("the stale renewal changed sched-b's lease")
	}
	v, err = d.send(ctx, worker, "sched-b", job, events.VerbRenew, `{"v":1,`+leaseRef(b)+`,"renew_seq":1}`)
	if err != nil {
		return "", err
	}
	if err := expect(v, events.KindRenewed, events.ReasonOk); err != nil {
		return "", err
	}
	return "the stale renewal got lost authority; epoch 2 kept its holder and expiry", nil
}

func (d *demo) lateRenewal(ctx context.Context, run string) (string, error) {
	job := "job-7-" + run
	o, err := d.send(ctx, op, "dispatcher", job, events.VerbOffer, `{"v":1,"holder":"w7","lease_ms":500}`)
	if err != nil {
		return "", err
	}
	if _, err := d.send(ctx, worker, "w7", job, events.VerbAck, `{"v":1,`+leaseRef(o)+`}`); err != nil {
		return "", err
	}
	if _, err := d.await(ctx, job, events.KindExpired); err != nil {
		return "", err
	}
	o8, err := d.send(ctx, op, "dispatcher", job, events.VerbOffer, `{"v":1,"holder":"w8","lease_ms":5000}`)
	if err != nil {
		return "", err
	}
	a8, err := d.send(ctx, worker, "w8", job, events.VerbAck, `{"v":1,`+leaseRef(o8)+`}`)
	if err != nil {
		return "", err
	}
	if err := expect(a8, events.KindAcked, events.ReasonOk); err != nil {
		return "", err
	}
	v, err := d.send(ctx, worker, "w7", job, events.VerbRenew, `{"v":1,`+leaseRef(o)+`,"renew_seq":1}`)
	if err != nil {
		return "", err
	}
	if err := expect(v, events.KindLostAuthority, events.ReasonStaleGeneration); err != nil {
		return "", err
	}
	if v.Job.Generation != o8.Job.Generation || v.Job.Holder != "w8" || v.Job.Stale != 1 {
		return "", fmt.Errorf("generation %d is not intact after the stale renewal", o8.Job.Generation)
	}
	return fmt.Sprintf("generation %d kept; the late renewal of generation %d recorded as stale", o8.Job.Generation, o.Job.Generation), nil
}

func (d *demo) reorderedProgress(ctx context.Context, run string) (string, error) {
	job := "scan-" + run
	g, err := d.send(ctx, worker, "w1", job, events.VerbAcquire, `{"v":1,"lease_ms":10000}`)
	if err != nil {
		return "", err
	}
	if _, err := d.send(ctx, worker, "w1", job, events.VerbProgress, `{"v":1,`+leaseRef(g)+`,"progress_seq":14,"value":70}`); err != nil {
		return "", err
	}
	fmt.Fprintln(d.out, "  the network delivers progress 12 after 14...")
	v, err := d.send(ctx, worker, "w1", job, events.VerbProgress, `{"v":1,`+leaseRef(g)+`,"progress_seq":12,"value":60}`)
	if err != nil {
		return "", err
	}
	if err := expect(v, events.KindLate, events.ReasonLateProgress); err != nil {
		return "", err
	}
	if v.Job.ProgressSeq != 14 || v.Job.ProgressValue != 70 {
		return "", fmt.Errorf("progress moved backward to %d/%d%%", v.Job.ProgressSeq, v.Job.ProgressValue)
	}
	v, err = d.send(ctx, worker, "w1", job, events.VerbResult, `{"v":1,`+leaseRef(g)+`,"outcome":"SUCCESS"}`)
	if err != nil {
		return "", err
	}
	if err := expect(v, events.KindCompleted, events.ReasonOk); err != nil {
		return "", err
	}
	return "progress stayed at 14 (70%); the late report is kept as evidence", nil
}

func (d *demo) cancelDuringDisconnect(ctx context.Context, run string) (string, error) {
	job := "export-" + run
	o, err := d.send(ctx, op, "dispatcher", job, events.VerbOffer, `{"v":1,"holder":"w2","lease_ms":800}`)
	if err != nil {
		return "", err
	}
	if _, err := d.send(ctx, worker, "w2", job, events.VerbAck, `{"v":1,`+leaseRef(o)+`}`); err != nil {
		return "", err
	}
	if _, err := d.send(ctx, worker, "w2", job, events.VerbProgress, `{"v":1,`+leaseRef(o)+`,"progress_seq":1,"value":10}`); err != nil {
		return "", err
	}
	fmt.Fprintln(d.out, "  w2 loses its connection; the operator cancels the job...")
	if v, err := d.send(ctx, op, "operator", job, events.VerbCancel, `{"v":1,"reason":"customer withdrew the export"}`); err != nil || expect(v, events.KindCancelRequested, events.ReasonOk) != nil {
		return "", errors.Join(err, expect(v, events.KindCancelRequested, events.ReasonOk))
	}
	fmt.Fprintln(d.out, "  w2 comes back with the progress it made while disconnected...")
	v, err := d.send(ctx, worker, "w2", job, events.VerbProgress, `{"v":1,`+leaseRef(o)+`,"progress_seq":2,"value":20}`)
	if err != nil {
		return "", err
	}
	if err := expect(v, events.KindLate, events.ReasonProgressAfterCancel); err != nil {
		return "", err
	}
	v, err = d.send(ctx, worker, "w2", job, events.VerbRenew, `{"v":1,`+leaseRef(o)+`,"renew_seq":1}`)
	if err != nil {
		return "", err
	}
	if err := expect(v, events.KindLostAuthority, events.ReasonCancelRequested); err != nil {
		return "", err
	}
	u, err := d.await(ctx, job, events.KindUnresolved)
	if err != nil {
		return "", err
	}
	if u.Job.State != events.StateUnresolved {
		return "", fmt.Errorf("state %s after the unreconciled expiry", u.Job.State)
	}
	if v, err := d.send(ctx, op, "dispatcher", job, events.VerbOffer, `{"v":1,"holder":"w3"}`); err != nil || expect(v, events.KindRejected, events.ReasonJobUnresolved) != nil {
		return "", errors.Join(err, expect(v, events.KindRejected, events.ReasonJobUnresolved))
	}
	v, err = d.send(ctx, op, "operator", job, events.VerbResolve, `{"v":1,"action":"settle","outcome":"CANCELLED","reason":"w2's host confirmed stopped"}`)
	if err != nil {
		return "", err
	}
	if err := expect(v, events.KindResolved, events.ReasonSettled); err != nil {
		return "", err
	}
	return "late progress kept as evidence, renewal refused, UNRESOLVED until the operator settled it CANCELLED", nil
}

func (d *demo) ackWithoutResult(ctx context.Context, run string) (string, error) {
	job := "report-" + run
	o, err := d.send(ctx, op, "dispatcher", job, events.VerbOffer, `{"v":1,"holder":"w4","lease_ms":500}`)
	if err != nil {
		return "", err
	}
	a, err := d.send(ctx, worker, "w4", job, events.VerbAck, `{"v":1,`+leaseRef(o)+`}`)
	if err != nil {
		return "", err
	}
	if a.Job.State != events.StateActive || a.Job.Result != events.OutcomeNone {
		return "", fmt.Errorf("ACK changed the lease to %s/%s", a.Job.State, a.Job.Result)
	}
	fmt.Fprintln(d.out, "  w4 ACKed and then went silent...")
	if _, err := d.await(ctx, job, events.KindExpired); err != nil {
		return "", err
	}
	v, err := d.send(ctx, worker, "w4", job, events.VerbResult, `{"v":1,`+leaseRef(o)+`,"outcome":"SUCCESS"}`)
	if err != nil {
		return "", err
	}
	if err := expect(v, events.KindLate, events.ReasonResultAfterExpiry); err != nil {
		return "", err
	}
	if v.Job.State != events.StateExpired || v.Job.Result != events.OutcomeNone {
		return "", fmt.Errorf("the late result changed the record to %s/%s", v.Job.State, v.Job.Result)
	}
	return "ownership expired, completion unproven: the late SUCCESS was refused", nil
}
