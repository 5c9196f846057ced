package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	neturl "net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/streams"
)

// HostileConfig configures a hostile worker process (RunHostile).
type HostileConfig struct {
	Credential string        // its credential file (tenure auth init), required
	URL        string        // server URLs, instead of the credential's
	ID         string        // its worker id: the credential's name
	Journal    string        // journal file: every input sent and PubAck received, as the honest workers'
	Control    string        // the orchestrator's rounds (HostileControl), polled
	Records    string        // its AttackRecords, JSON lines; Records+".done" holds the last round done (HostileDone)
	Lease      time.Duration // lease duration of its own leases
	Attacks    []string      // the attack types it makes (nil: AttackTypes)
	Boards     []string      // the web boards it attacks (AttackBoard), e.g. http://127.0.0.1:8080: on its host, as a worker on a coordinator's host reaches loopback
	Seed       uint64
	Logger     *slog.Logger
}

// HostileControl opens round Round of the hostile worker's attacks: it
// starts them at random points before Until (Unix ns), one after the
// other, and writes HostileDone when they are all over.
type HostileControl struct {
	Round int   `json:"round"`
	Until int64 `json:"until"`
	// MinAttacks is the fewest attacks of the round (0: two): the
	// orchestrator asks for more when its rounds are few, so that every
	// type comes up.
	MinAttacks int `json:"min_attacks,omitempty"`
	// What the strongest attacker knows of the others: the ids of the
	// coordinators and of the honest workers, and the jobs of the current
	// batch. A worker cannot list them itself (it may ask for no stream
	// info, whose subjects filter would list every decision subject), so
	// the orchestrator tells it, as a leak elsewhere might.
	Coordinators []string `json:"coordinators,omitempty"`
	Workers      []string `json:"workers,omitempty"`
	Jobs         []string `json:"jobs,omitempty"`
	// The queue the honest workers serve, and the queue jobs of the
	// round (the queue modes announce capacity on it; the learned-lease
	// attack acquires its jobs).
	Queue     string   `json:"queue,omitempty"`
	QueueJobs []string `json:"queue_jobs,omitempty"`
}

// HostileDone says which round the hostile worker finished last.
type HostileDone struct {
	Round int `json:"round"`
}

// writeJSON replaces the file at path atomically with v.
func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	return os.Rename(tmp, path)
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// RunHostile is the body of a hostile worker process: a worker holding
// nothing but its own credentials (its own subjects, its own account and
// its four consumer names on the decision stream) that attacks the
// deployment while the honest workers work. In every round the
// orchestrator opens, it runs two or three attacks, or more if the
// orchestrator asks (HostileControl.MinAttacks), at random points of the
// round (AttackTypes, dealt from a shuffled deck so that every type comes
// up within len(AttackTypes)/2 rounds), and records each (AttackRecord). Its
// randomness is its seed's; its connection is journaled like the honest
// workers' (Tap), so that its inputs are in the checked log with the
// others. It returns when ctx ends.
func RunHostile(ctx context.Context, cfg HostileConfig) error {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Lease <= 0 {
		cfg.Lease = time.Second
	}
	if len(cfg.Attacks) == 0 {
		cfg.Attacks = AttackTypes
	}
	for _, a := range cfg.Attacks {
		if !slices.Contains(AttackTypes, a) {
			return fmt.Errorf("chaos: hostile %s: unknown attack %q (known: %s)", cfg.ID, a, strings.Join(AttackTypes, ", "))
		}
	}
	j, err := OpenJournal(cfg.Journal)
	if err != nil {
		return err
	}
	defer j.Close()
	rf, err := os.OpenFile(cfg.Records, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("chaos: hostile %s: %w", cfg.ID, err)
	}
	defer rf.Close()
	h := &hostile{cfg: cfg, log: cfg.Logger.With("hostile", cfg.ID), rng: rand.New(rand.NewPCG(cfg.Seed, 0x4057113)), records: rf,
		errs: make(map[string]int)}
	tap := NewTap(j)
	nc, cred, err := connectCredential(cfg.Credential, cfg.URL, tap.Option(), nats.Name("chaos-hostile-"+cfg.ID),
		nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.RetryOnFailedConnect(true),
		nats.ErrorHandler(h.asyncError))
	if err != nil {
		return fmt.Errorf("chaos: hostile %s: connect: %w", cfg.ID, err)
	}
	defer nc.Close()
	h.nc, h.api = nc, cred.JetStreamAPIPrefix+"."
	if h.js, err = jetstream.NewWithAPIPrefix(nc, cred.JetStreamAPIPrefix,
		jetstream.WithPublishAsyncMaxPending(256), jetstream.WithPublishAsyncTimeout(3*time.Second)); err != nil {
		return err
	}
	done := 0
	var last HostileDone
	if readJSON(cfg.Records+".done", &last) == nil {
		done = last.Round // restarted: the rounds done before stay done
	}
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		var c HostileControl
		if err := readJSON(cfg.Control, &c); err == nil && c.Round > done {
			h.round(ctx, c)
			done = c.Round
			if err := writeJSON(cfg.Records+".done", HostileDone{Round: done}); err != nil {
				h.log.Warn("done file", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			if err := tap.Err(); err != nil {
				return fmt.Errorf("chaos: hostile %s: journal: %w", cfg.ID, err)
			}
			return nil
		case <-t.C:
		}
	}
}

type hostile struct {
	cfg     HostileConfig
	log     *slog.Logger
	rng     *rand.Rand // used by the round's goroutine only
	nc      *nats.Conn
	js      jetstream.JetStream // under its account's API prefix
	api     string              // that prefix, with its dot
	records *os.File

	deck    []string
	n       int    // Msg-Ids and names made
	lastSeq uint64 // the highest input sequence of its PubAcks

	// What it was told of the others (HostileControl).
	coords, others []string // coordinators, other workers
	jobs           []string // the jobs of the current batch
	queue          string   // the honest workers' queue
	queueJobs      []string // its jobs of the current round

	violations atomic.Int64 // permissions violations the server reported
	mu         sync.Mutex
	errs       map[string]int // other asynchronous errors
}

func (h *hostile) asyncError(_ *nats.Conn, _ *nats.Subscription, err error) {
	if errors.Is(err, nats.ErrPermissionViolation) {
		h.violations.Add(1)
		return
	}
	h.mu.Lock()
	h.errs[err.Error()]++
	h.mu.Unlock()
}

// round runs the attacks of one round.
func (h *hostile) round(ctx context.Context, c HostileControl) {
	n := 2
	if h.rng.Float64() < 0.35 {
		n = 3
	}
	n = max(n, c.MinAttacks)
	var types []string
	for range n {
		if len(h.deck) == 0 {
			h.deck = slices.Clone(h.cfg.Attacks)
			h.rng.Shuffle(len(h.deck), func(i, j int) { h.deck[i], h.deck[j] = h.deck[j], h.deck[i] })
		}
		types, h.deck = append(types, h.deck[0]), h.deck[1:]
	}
	window := max(time.Until(time.Unix(0, c.Until)), 100*time.Millisecond)
	offsets := make([]time.Duration, n)
	for i := range offsets {
		offsets[i] = time.Duration(h.rng.Int64N(int64(window / 2)))
	}
	slices.Sort(offsets)
	h.learn(c)
	t0 := time.Now()
	for i, typ := range types {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(t0.Add(offsets[i]))):
		}
		rec := h.attack(ctx, c.Round, typ)
		b, _ := json.Marshal(rec)
		if _, err := h.records.Write(append(b, '\n')); err != nil {
			h.log.Warn("records", "err", err)
		}
	}
}

// attack runs one attack and returns its record.
func (h *hostile) attack(ctx context.Context, round int, typ string) AttackRecord {
	rec := AttackRecord{Hostile: h.cfg.ID, Round: round, Type: typ, At: time.Now().UnixNano(), Errors: make(map[string]int)}
	before := h.violations.Load()
	actx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	switch typ {
	case AttackBadInput:
		h.badInputs(actx, &rec)
	case AttackLeaseGuess:
		h.leaseGuess(actx, &rec)
	case AttackConsumerHog:
		h.consumerHog(actx, &rec)
	case AttackForgedDelivery:
		h.forgedDelivery(actx, &rec)
	case AttackTickIDs:
		h.tickIDs(actx, &rec)
	case AttackFlood:
		h.flood(actx, &rec)
	case AttackBoard:
		h.board(actx, &rec)
	case AttackLearnedLease:
		h.learnedLease(actx, &rec)
	case AttackQueueDecline, AttackQueueRelease, AttackQueueNoAck, AttackQueueExpire:
		h.queueMode(actx, &rec, typ)
	}
	// The server reports a permissions violation after the message, on the
	// connection: a round trip, and a moment for the handler.
	_ = h.nc.FlushTimeout(2 * time.Second)
	time.Sleep(20 * time.Millisecond)
	rec.Refused += int(h.violations.Load() - before)
	rec.Dur = time.Now().UnixNano() - rec.At
	if len(rec.Errors) == 0 {
		rec.Errors = nil
	}
	return rec
}

// note counts an answer or an error by its description (a dozen kinds at
// most).
func (rec *AttackRecord) note(what string) {
	if len(rec.Errors) < 12 {
		rec.Errors[what]++
	} else if _, ok := rec.Errors[what]; ok {
		rec.Errors[what]++
	}
}

// subject is the hostile worker's own input subject of job and verb.
func (h *hostile) subject(job, verb string) string {
	return events.InputPrefix + ".worker." + h.cfg.ID + "." + job + "." + verb
}

// msgID is a fresh Nats-Msg-Id of its own.
func (h *hostile) msgID() string {
	h.n++
	return fmt.Sprintf("%s-%d-%08x", h.cfg.ID, h.n, h.rng.Uint32())
}

// maxBody is the largest body the server accepts from it with a Nats-Msg-Id
// of len(id) bytes (its account's max_payload, headers included).
func (h *hostile) maxBody(id string) int {
	hdr := len("NATS/1.0\r\n") + len(nats.MsgIdHdr+": ") + len(id) + len("\r\n\r\n")
	return int(h.nc.MaxPayload()) - hdr
}

func (h *hostile) randomChars(n int) string {
	b := make([]byte, (n*6+7)/8+1)
	for i := range b {
		b[i] = byte(h.rng.Uint32())
	}
	return base64.RawURLEncoding.EncodeToString(b)[:n]
}

// guessLease guesses the lease id of a lease created by a recent input: the
// predictable id of rules revision 1 (L<seq>), or one of the form of
// revision 2 (L<seq>-<22 characters>).
func (h *hostile) guessLease() string {
	seq := uint64(1)
	if h.lastSeq > 1 {
		seq = h.lastSeq - uint64(h.rng.Int64N(int64(min(h.lastSeq-1, 300))))
	}
	if h.rng.IntN(2) == 0 {
		return fmt.Sprintf("L%d", seq)
	}
	return fmt.Sprintf("L%d-%s", seq, h.randomChars(22))
}

func (h *hostile) pick(from []string, def string) string {
	if len(from) == 0 {
		return def
	}
	return from[h.rng.IntN(len(from))]
}

// target is a job of another worker (now and then one that does not exist).
func (h *hostile) target() string {
	if len(h.jobs) == 0 || h.rng.IntN(5) == 0 {
		return fmt.Sprintf("%s-ghost-%d", h.cfg.ID, h.rng.IntN(1000))
	}
	return h.jobs[h.rng.IntN(len(h.jobs))]
}

// learn takes what the orchestrator told it of the others (it can list
// none of it itself): the coordinators, the other workers and the jobs of
// the current batch.
func (h *hostile) learn(c HostileControl) {
	if len(c.Coordinators) > 0 {
		h.coords = slices.Sorted(slices.Values(c.Coordinators))
	}
	if others := slices.DeleteFunc(slices.Clone(c.Workers), func(w string) bool { return w == h.cfg.ID }); len(others) > 0 {
		h.others = slices.Sorted(slices.Values(others))
	}
	if len(c.Jobs) > 0 {
		h.jobs = slices.Compact(slices.Sorted(slices.Values(c.Jobs)))
	}
	if c.Queue != "" {
		h.queue = c.Queue
	}
	h.queueJobs = slices.Compact(slices.Sorted(slices.Values(c.QueueJobs)))
}

// publish publishes an input with Msg-Id id as a JetStream publish (nil
// future: the client refused it, recorded).
func (h *hostile) publish(rec *AttackRecord, subject string, body []byte, id string) jetstream.PubAckFuture {
	msg := &nats.Msg{Subject: subject, Data: body, Header: nats.Header{}}
	msg.Header.Set(nats.MsgIdHdr, id)
	rec.Published++
	f, err := h.js.PublishMsgAsync(msg)
	if err != nil {
		rec.Refused++
		rec.note("client: " + err.Error())
		return nil
	}
	return f
}

// resendFor is how long an attack resends, as any client would, the
// publishes that found no stream to answer them (a stream leader being
// elected, a server restarting): the attacks go on through the faults.
const resendFor = 8 * time.Second

// await waits for the PubAcks of fs (until ctx ends) and records them,
// resending those that found no stream for resendFor. It returns the
// sequences of the inputs stored.
func (h *hostile) await(ctx context.Context, rec *AttackRecord, fs []jetstream.PubAckFuture) (seqs []uint64) {
	deadline := time.Now().Add(resendFor)
	for len(fs) > 0 {
		var again []*nats.Msg
		for _, f := range fs {
			if f == nil {
				continue
			}
			select {
			case ack := <-f.Ok():
				rec.Stored++
				if _, intake := (streams.Topology{}).IntakeWorker(ack.Stream); intake {
					rec.Intake = true
				} else {
					h.lastSeq = max(h.lastSeq, ack.Sequence)
				}
				seqs = append(seqs, ack.Sequence)
			case err := <-f.Err():
				noStream := errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders)
				switch {
				case noStream && time.Now().Before(deadline) && ctx.Err() == nil:
					again = append(again, f.Msg())
				case noStream || errors.Is(err, jetstream.ErrAsyncPublishTimeout):
					rec.Unanswered++
					rec.note(err.Error())
				default:
					rec.Refused++
					if streams.QuotaRefusal(err) {
						rec.Quota++
						if rec.Quota > 1 {
							break // one note is enough
						}
					}
					rec.note(err.Error())
				}
			case <-ctx.Done():
				rec.Unanswered++
			}
		}
		fs = nil
		if len(again) > 0 {
			time.Sleep(250 * time.Millisecond)
			rec.note("resent: no stream answered")
		}
		for _, m := range again {
			f, err := h.js.PublishMsgAsync(m)
			if err != nil {
				rec.Refused++
				rec.note("client: " + err.Error())
				continue
			}
			fs = append(fs, f)
		}
	}
	return seqs
}

// core publishes a message with Msg-Id id (if not empty) and reply subject
// reply as a core NATS publish: no PubAck is awaited.
func (h *hostile) core(rec *AttackRecord, subject, reply string, body []byte, id string) {
	msg := &nats.Msg{Subject: subject, Reply: reply, Data: body}
	if id != "" {
		msg.Header = nats.Header{nats.MsgIdHdr: []string{id}}
	}
	rec.Published++
	if err := h.nc.PublishMsg(msg); err != nil {
		rec.Refused++
		rec.note("client: " + err.Error())
	}
}

// badInputs sends cases of the catalogue, aimed at other workers' jobs.
func (h *hostile) badInputs(ctx context.Context, rec *AttackRecord) {
	cases := catalogue()
	var fs []jetstream.PubAckFuture
	for range 8 + h.rng.IntN(8) {
		c := cases[h.rng.IntN(len(cases))]
		job, other, coord, lease := h.target(), h.pick(h.others, "w1"), h.pick(h.coords, "c1"), h.guessLease()
		subject := c.expand(c.Subject, h.cfg.ID, job, other, coord, lease)
		body := c.expand(c.Body, h.cfg.ID, job, other, coord, lease)
		id := h.msgID()
		pad := c.Pad
		if pad < 0 {
			pad = h.maxBody(id)
		}
		if pad > len(body) {
			body += strings.Repeat(" ", pad-len(body))
		}
		e := Expect{MsgID: id, Case: c.Cat + "/" + c.Name, Refused: c.Refused}
		if c.Kind != 0 {
			e.Verdict = c.Kind.String() + "/" + string(c.Reason)
		}
		rec.Expect = append(rec.Expect, e)
		if c.Refused {
			h.core(rec, subject, "", []byte(body), id)
		} else {
			fs = append(fs, h.publish(rec, subject, []byte(body), id))
		}
	}
	h.await(ctx, rec, fs)
}

// probe stores an input of its own and learns the input stream's end from
// its PubAck.
func (h *hostile) probe(ctx context.Context, rec *AttackRecord) {
	f := h.publish(rec, h.subject(h.cfg.ID+"-probe", "progress"),
		[]byte(`{"v":1,"lease_id":"L1","generation":1,"progress_seq":1,"value":1}`), h.msgID())
	h.await(ctx, rec, []jetstream.PubAckFuture{f})
}

// generation is a generation to claim, 1 to 3: mostly 1, where most jobs
// are.
func (h *hostile) generation() int {
	switch g := h.rng.IntN(20); {
	case g < 14:
		return 1
	case g < 17:
		return 2
	default:
		return 3
	}
}

// leaseGuess claims other workers' jobs under guessed lease ids: a batch
// renew of 96 guesses per job (the ids of revision 1 of the last 48
// inputs, ids of the form of revision 2 for the others), then a progress,
// result, release, cancel ACK, ACK and renewal each, mostly of generation
// 1 (an older generation than the job's is judged before the lease id, a
// newer one too: neither tests the id). Every guess costs the coordinator
// a decision: the batches are kept small enough for the honest verdicts
// not to wait behind them for long.
func (h *hostile) leaseGuess(ctx context.Context, rec *AttackRecord) {
	const guesses = 96
	h.probe(ctx, rec)
	jobs := slices.Clone(h.jobs)
	h.rng.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
	jobs = jobs[:min(len(jobs), 3)]
	rec.Targets = jobs
	var fs []jetstream.PubAckFuture
	for _, job := range jobs {
		var b strings.Builder
		b.WriteString(`{"v":1,"leases":[`)
		for i := range guesses {
			lease := h.guessLease()
			if i < guesses/2 && h.lastSeq > uint64(i) {
				lease = fmt.Sprintf("L%d", h.lastSeq-uint64(i))
			}
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"job":%q,"lease_id":%q,"generation":%d,"renew_seq":%d}`, job, lease, h.generation(), 1+h.rng.IntN(9))
		}
		b.WriteString(`]}`)
		fs = append(fs, h.publish(rec, h.subject(events.NoJob, "renew"), []byte(b.String()), h.msgID()))
		for _, verb := range []string{"progress", "result", "release", "cancel_ack", "ack", "renew"} {
			claim := fmt.Sprintf(`"lease_id":%q,"generation":%d`, h.guessLease(), h.generation())
			var body string
			switch verb {
			case "progress":
				body = fmt.Sprintf(`{"v":1,%s,"progress_seq":%d,"value":%d}`, claim, 1+h.rng.IntN(9), h.rng.IntN(101))
			case "result":
				body = fmt.Sprintf(`{"v":1,%s,"outcome":"SUCCESS"}`, claim)
			case "renew":
				body = fmt.Sprintf(`{"v":1,%s,"renew_seq":%d}`, claim, 1+h.rng.IntN(9))
			default:
				body = fmt.Sprintf(`{"v":1,%s}`, claim)
			}
			fs = append(fs, h.publish(rec, h.subject(job, verb), []byte(body), h.msgID()))
		}
	}
	h.await(ctx, rec, fs)
}

// apiError is the error of a JetStream API answer.
type apiError struct {
	Error *struct {
		Description string `json:"description"`
	} `json:"error"`
}

// consumerHog asks for many consumers on the decision stream: its own
// consumer names, made-up ones, other filters, through the plain API and
// under its account's API prefix, 32 requests at a time; then pulls from
// those it got.
func (h *hostile) consumerHog(ctx context.Context, rec *AttackRecord) {
	out := streams.Topology{}.DecisionStream()
	own := events.AddresseeFilter(h.cfg.ID)
	body := func(name, filter string) []byte {
		return fmt.Appendf(nil, `{"stream_name":%q,"action":"create","config":{"name":%q,"filter_subject":%q,`+
			`"deliver_policy":"all","ack_policy":"none","inactive_threshold":%d,"mem_storage":true,"num_replicas":1}}`,
			out, name, filter, time.Hour.Nanoseconds())
	}
	type req struct {
		name, subject string
		body          []byte
	}
	var reqs []req
	names := events.WorkerConsumerNames(h.cfg.ID)[:events.WorkerConsumers-1] // the last one reads its verdicts
	for _, n := range names {
		reqs = append(reqs, req{n, h.api + "CONSUMER.CREATE." + out + "." + n + "." + own, body(n, own)})
	}
	for range 12 {
		h.n++
		n := fmt.Sprintf("hog%d", h.n)
		reqs = append(reqs, req{n, h.api + "CONSUMER.CREATE." + out + "." + n + "." + own, body(n, own)})
	}
	for range 6 {
		h.n++
		n := fmt.Sprintf("hog%d", h.n)
		reqs = append(reqs, req{n, "$JS.API.CONSUMER.CREATE." + out + "." + n + "." + own, body(n, own)})
	}
	reqs = append(reqs,
		req{names[0], h.api + "CONSUMER.CREATE." + out + "." + names[0] + "." + events.DecisionFilter, body(names[0], events.DecisionFilter)},
		req{"", "$JS.API.CONSUMER.CREATE." + out, body("", own)},
		req{"", h.api + "CONSUMER.DURABLE.CREATE." + out + ".hog", body("hog", own)},
	)
	var mu sync.Mutex
	var made []string
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for _, r := range reqs {
		rec.Published++
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			m, err := h.nc.Request(r.subject, r.body, 300*time.Millisecond)
			var ae apiError
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				rec.Unanswered++ // a permissions violation gets no answer (counted as refused too)
			case json.Unmarshal(m.Data, &ae) != nil:
				rec.note("bad answer")
			case ae.Error != nil:
				rec.Refused++
				rec.note("jetstream: " + ae.Error.Description)
			default:
				rec.Consumers++
				made = append(made, r.name)
				rec.Targets = append(rec.Targets, r.name) // what the server let it create
			}
		})
	}
	wg.Wait()
	for _, n := range made {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		c, err := h.js.Consumer(pctx, out, n)
		if err == nil {
			var b jetstream.MessageBatch
			if b, err = c.Fetch(256, jetstream.FetchMaxWait(200*time.Millisecond)); err == nil {
				for range b.Messages() {
					rec.Pulled++
				}
			}
		}
		cancel()
		if err != nil {
			rec.note("pull: " + err.Error())
		}
	}
}

// forgedDelivery makes its own consumers push its own decisions to subjects
// of the deployment's account that others listen to or that streams and the
// JetStream API would take (status endpoints, the micro service, inboxes
// of other clients, other actors' input subjects, the leadership bucket,
// the API), then publishes inputs and API requests whose replies go there.
func (h *hostile) forgedDelivery(ctx context.Context, rec *AttackRecord) {
	top := streams.Topology{}
	out := top.DecisionStream()
	coord, other, job := h.pick(h.coords, "c1"), h.pick(h.others, "w1"), h.target()
	guess := func() string {
		b := make([]byte, 16)
		for i := range b {
			b[i] = byte(h.rng.Uint32())
		}
		return hex.EncodeToString(b)
	}
	pool := []string{
		"tenure.status." + coord, "$SRV.PING", "$SRV.PING.tenure", "$SRV.STATS.tenure", "$SRV.INFO.tenure",
		"_INBOX_" + coord + "." + guess() + ".1", "_INBOX_" + other + "." + guess() + ".1", "_INBOX_disp." + guess(), "_INBOX." + guess(),
		"tenure.in.worker." + other + "." + job + ".release", "tenure.in.ops.disp." + job + ".cancel", "tenure.in.coord." + coord + "._.tick",
		"$KV." + top.LeaderBucket() + ".leader",
		"$JS.API.STREAM.PURGE." + top.InputStream(), "$JS.API.STREAM.MSG.DELETE." + top.InputStream(),
		"$JS.API.CONSUMER.DELETE." + out + "." + events.WorkerConsumerName(other, 0),
		"tenure.out." + other + "." + job + ".granted", // a cycle: the server refuses it
	}
	h.rng.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
	targets := pool[:3]
	rec.Targets = targets
	names := events.WorkerConsumerNames(h.cfg.ID)
	var pushed []string
	for i, target := range targets {
		name := names[i%(events.WorkerConsumers-1)]
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		_ = h.js.DeleteConsumer(dctx, out, name)
		rec.Published++
		_, err := h.js.CreateConsumer(dctx, out, jetstream.ConsumerConfig{
			Name: name, FilterSubject: events.AddresseeFilter(h.cfg.ID), DeliverSubject: target,
			DeliverPolicy: jetstream.DeliverLastPolicy, AckPolicy: jetstream.AckNonePolicy,
			InactiveThreshold: time.Minute, MemoryStorage: true, Replicas: 1,
		})
		cancel()
		if err != nil {
			rec.Refused++
			rec.note("push consumer: " + err.Error())
			continue
		}
		rec.Consumers++
		pushed = append(pushed, name)
	}
	// New decisions of its own, pushed to the targets as they are stored.
	var fs []jetstream.PubAckFuture
	for range 3 {
		fs = append(fs, h.publish(rec, h.subject(h.cfg.ID+"-decoy", "progress"),
			[]byte(`{"v":1,"lease_id":"L1","generation":1,"progress_seq":1,"value":1}`), h.msgID()))
	}
	h.await(ctx, rec, fs)
	time.Sleep(100 * time.Millisecond)
	for _, name := range pushed {
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		_ = h.js.DeleteConsumer(dctx, out, name)
		cancel()
	}
	// PubAcks and API answers sent to the targets.
	for _, target := range targets {
		h.core(rec, h.subject(h.cfg.ID+"-decoy", "progress"), target,
			[]byte(`{"v":1,"lease_id":"L1","generation":1,"progress_seq":1,"value":1}`), h.msgID())
		rec.Published++
		if err := h.nc.PublishRequest(h.api+"STREAM.INFO."+out, target, nil); err != nil {
			rec.note("client: " + err.Error())
		}
	}
}

// verdict publishes body on its own subject of job and verb and returns its
// verdict, read as a worker reads its decisions: through the last of its
// consumer names, made anew from the decision stream's end (deliver policy
// new: a worker has no stream info).
func (h *hostile) verdict(ctx context.Context, rec *AttackRecord, job, verb, body string) (events.Decision, error) {
	ctx, cancel := context.WithTimeout(ctx, resendFor)
	defer cancel()
	cons, err := h.verdictConsumer(ctx)
	if err != nil {
		return events.Decision{}, err
	}
	seqs := h.await(ctx, rec, []jetstream.PubAckFuture{h.publish(rec, h.subject(job, verb), []byte(body), h.msgID())})
	if len(seqs) == 0 {
		return events.Decision{}, errors.New("not stored")
	}
	seq := seqs[0]
	for {
		m, err := cons.Next(jetstream.FetchContext(ctx))
		if err != nil {
			return events.Decision{}, err
		}
		rec.Pulled++
		d, err := events.DecodeDecision(m.Data())
		if err == nil && pubAckSeqOf(m, &d) == seq && !d.Kind.Derived() {
			return d, nil
		}
	}
}

// pubAckSeqOf is the sequence the PubAck of the input that caused decision d
// (stored as m) named: its intake stream's, which the decisions addressed
// to the worker carry as Tenure-Source-Seq, with quotas (PROTOCOL.md
// §4.2); else the input stream's, its cause.
func pubAckSeqOf(m jetstream.Msg, d *events.Decision) uint64 {
	if src, err := strconv.ParseUint(m.Headers().Get(events.HeaderSourceSeq), 10, 64); err == nil && src > 0 {
		return src
	}
	return d.Cause
}

// verdictConsumer makes anew, from the decision stream's end, the consumer
// of the decisions addressed to the hostile worker under the last of its
// consumer names (deliver policy new: a worker has no stream info).
func (h *hostile) verdictConsumer(ctx context.Context) (jetstream.Consumer, error) {
	out := streams.Topology{}.DecisionStream()
	name := events.WorkerConsumerName(h.cfg.ID, events.WorkerConsumers-1)
	_ = h.js.DeleteConsumer(ctx, out, name)
	return h.js.CreateConsumer(ctx, out, jetstream.ConsumerConfig{
		Name: name, FilterSubject: events.AddresseeFilter(h.cfg.ID), AckPolicy: jetstream.AckNonePolicy,
		DeliverPolicy: jetstream.DeliverNewPolicy, InactiveThreshold: time.Minute, MemoryStorage: true, Replicas: 1,
	})
}

// tickIDs acquires a lease of its own and stores, before the lease's
// expiry, messages with the Nats-Msg-Ids the coordinators' ticks for that
// deadline had before they became random (tick-<coordinator>-<deadline
// ns>-<attempt>), and a few of the present form with guessed random parts:
// if the duplicate window dropped the coordinators' ticks, the lease would
// not expire while nobody else publishes.
func (h *hostile) tickIDs(ctx context.Context, rec *AttackRecord) {
	h.n++
	job := fmt.Sprintf("%s-own-%d", h.cfg.ID, h.n)
	expires := time.Now().Add(h.cfg.Lease).UnixNano()
	d, err := h.verdict(ctx, rec, job, "acquire", fmt.Sprintf(`{"v":1,"lease_ms":%d}`, h.cfg.Lease.Milliseconds()))
	switch {
	case err != nil:
		rec.note("acquire: " + err.Error())
	case d.Kind != events.KindGranted:
		rec.note(fmt.Sprintf("acquire: %s/%s", d.Kind, d.Reason))
	default:
		expires = d.Job.ExpiresAt
		rec.Leases = append(rec.Leases, OwnLease{Job: job, LeaseID: d.Job.LeaseID, ExpiresAt: expires})
	}
	rec.Targets = []string{job}
	var fs []jetstream.PubAckFuture
	// The coordinators it saw on the decision stream, and those the chaos
	// environment's naming suggests.
	coords := slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(h.coords), "c1", "c2"))))
	for _, c := range coords {
		for attempt := range 8 {
			id := fmt.Sprintf("tick-%s-%d-%d", c, expires, attempt)
			fs = append(fs, h.publish(rec, h.subject(job, "progress"), []byte(`{"v":1}`), id))
		}
		fs = append(fs, h.publish(rec, h.subject(job, "progress"), []byte(`{"v":1}`), fmt.Sprintf("tick-%s-%s", c, h.randomChars(32))))
	}
	h.await(ctx, rec, fs)
	if time.Now().UnixNano() >= expires {
		rec.note("tick ids stored after the lease's expiry")
	}
}

// flood publishes, as fast as the client lets it, many small inputs and a
// few bodies of the largest sizes: the protocol's limit (judged), one byte
// more and the server's (rejected too_large), and one the client refuses.
func (h *hostile) flood(ctx context.Context, rec *AttackRecord) {
	var fs []jetstream.PubAckFuture
	body := []byte(`{"v":1,"lease_id":"L1","generation":1,"progress_seq":1,"value":1}`)
	for i := range 80 + h.rng.IntN(120) {
		fs = append(fs, h.publish(rec, h.subject(fmt.Sprintf("%s-flood-%d", h.cfg.ID, i%16), "progress"), body, h.msgID()))
	}
	for range 2 + h.rng.IntN(4) {
		id := h.msgID()
		sizes := []int{events.MaxInputBytes, events.MaxInputBytes + 1, h.maxBody(id)}
		size := sizes[h.rng.IntN(len(sizes))]
		if size > events.MaxInputBytes {
			rec.Expect = append(rec.Expect, Expect{MsgID: id, Case: fmt.Sprintf("flood/body-%d-bytes", size), Verdict: "rejected/" + string(events.ReasonTooLarge)})
		}
		big := append(bytes.Repeat([]byte(" "), size-len(body)), body...)
		fs = append(fs, h.publish(rec, h.subject(fmt.Sprintf("%s-flood-big", h.cfg.ID), "progress"), big, id))
	}
	id := h.msgID()
	fs = append(fs, h.publish(rec, h.subject(h.cfg.ID+"-flood-big", "progress"), bytes.Repeat([]byte(" "), h.maxBody(id)+1), id))
	h.await(ctx, rec, fs)
	// Past its quota (tenure auth init's, PROTOCOL.md §4.2): small inputs
	// as fast as the server answers, until it refuses floodRefusals of
	// them over the quota (or floodMax are sent): with an intake stream
	// the checks then require a refusal over the quota.
	for sent := 0; sent < floodMax && rec.Quota < floodRefusals && ctx.Err() == nil; {
		fs = fs[:0]
		for i := range 256 {
			fs = append(fs, h.publish(rec, h.subject(fmt.Sprintf("%s-flood-%d", h.cfg.ID, i%16), "progress"), body, h.msgID()))
		}
		sent += len(fs)
		h.await(ctx, rec, fs)
	}
}

// The flood past the quota: it stops after floodRefusals refusals over the
// quota, or floodMax inputs (without an intake stream nothing refuses
// them: they are stored, and folded).
const (
	floodRefusals = 10
	floodMax      = 4096
)

// boardBody bounds what the board attack keeps of an answer.
const boardBody = 256 << 10

// board asks every web board (HostileConfig.Boards) for its pages and its
// API without a credential, with forged ones (a session cookie, a guessed
// bearer token, a token as basic auth, the board's own Origin and a CSRF
// header, which a program, unlike a browser, sets at will), and tries an
// action, an audit, a logout and a login with a guessed token. Each must
// be refused: a page with a redirect to the login page, anything else with
// 401. It keeps what /healthz and /metrics, open to anyone, answer.
func (h *hostile) board(ctx context.Context, rec *AttackRecord) {
	p := &BoardProbe{Boards: len(h.cfg.Boards)}
	rec.Board = p
	if len(h.cfg.Boards) == 0 {
		rec.note("no board to attack")
		return
	}
	job := h.target()
	rec.Targets = []string{job}
	client := &http.Client{Timeout: 2 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	guess := "tenure_operator_" + h.randomChars(43)
	forged := []struct {
		name string
		set  func(r *http.Request, base string)
	}{
		{"no credential", func(*http.Request, string) {}},
		{"a forged session cookie", func(r *http.Request, _ string) {
			r.AddCookie(&http.Cookie{Name: "tenure_session", Value: h.randomChars(43)})
		}},
		{"a guessed bearer token", func(r *http.Request, _ string) { r.Header.Set("Authorization", "Bearer "+guess) }},
		{"a token as basic auth", func(r *http.Request, _ string) { r.SetBasicAuth("operator", guess) }},
		{"the board's Origin and a CSRF header", func(r *http.Request, base string) {
			r.Header.Set("Origin", base)
			r.Header.Set("Sec-Fetch-Site", "same-origin")
			r.Header.Set("X-Tenure-CSRF", h.randomChars(43))
		}},
	}
	type try struct {
		method, path, body, contentType string
		page                            bool // a page: its refusal is a redirect to the login page
	}
	var tries []try
	for _, path := range []string{"/", "/jobs/" + job, "/anomalies", "/audit"} {
		tries = append(tries, try{method: http.MethodGet, path: path, page: true})
	}
	for _, path := range []string{"/api/config", "/api/jobs", "/api/jobs?state=LIVE&limit=500", "/api/jobs/" + job, "/api/anomalies", "/api/queues",
		"/api/audit", "/api/events?watch=" + job + "&job=" + job + "&feed=0", "/assets/app.js"} {
		tries = append(tries, try{method: http.MethodGet, path: path})
	}
	tries = append(tries,
		try{method: http.MethodPost, path: "/api/jobs/" + job + "/action", body: `{"action":"cancel","reason":"hostile"}`, contentType: "application/json"},
		try{method: http.MethodPost, path: "/api/jobs/" + job + "/action", body: `{"action":"revoke"}`, contentType: "text/plain"},
		try{method: http.MethodPost, path: "/api/audit", body: `{}`, contentType: "application/json"},
		try{method: http.MethodPost, path: "/logout", contentType: "application/json"},
	)
	do := func(base, method, path, body, contentType string, set func(*http.Request, string)) (int, http.Header, string, bool) {
		req, err := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
		if err != nil {
			rec.note("request: " + err.Error())
			return 0, nil, "", false
		}
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		set(req, base)
		rec.Published++
		resp, err := client.Do(req)
		if err != nil {
			rec.Unanswered++ // a board down (its coordinator killed), or the time out
			rec.note("board: no answer")
			return 0, nil, "", false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, boardBody))
		p.Reached++
		return resp.StatusCode, resp.Header, string(b), true
	}
	for _, base := range h.cfg.Boards {
		for _, t := range tries {
			for _, f := range forged {
				code, hdr, _, ok := do(base, t.method, t.path, t.body, t.contentType, f.set)
				if !ok {
					continue
				}
				refused := code == http.StatusUnauthorized
				if t.page {
					refused = code == http.StatusSeeOther && strings.HasPrefix(hdr.Get("Location"), "/login")
				}
				if refused {
					rec.Refused++
					rec.note(fmt.Sprintf("board: %d", code))
				} else {
					p.Answered = append(p.Answered, fmt.Sprintf("%s %s%s (%s): %d", t.method, base, t.path, f.name, code))
				}
			}
		}
		// A login with a guessed token, from the board's own form as far
		// as the headers say.
		code, hdr, _, ok := do(base, http.MethodPost, "/login", neturl.Values{"token": {guess}}.Encode(), "application/x-www-form-urlencoded",
			func(r *http.Request, base string) { r.Header.Set("Origin", base) })
		if ok {
			if code == http.StatusUnauthorized && len(hdr.Values("Set-Cookie")) == 0 {
				rec.Refused++
				rec.note(fmt.Sprintf("board: login %d", code))
			} else {
				p.Answered = append(p.Answered, fmt.Sprintf("POST %s/login (a guessed token): %d, cookies %q", base, code, hdr.Values("Set-Cookie")))
			}
		}
		// Open to anyone: kept for the checks.
		for _, path := range []string{"/healthz", "/metrics"} {
			if _, _, body, ok := do(base, http.MethodGet, path, "", "", func(*http.Request, string) {}); ok {
				p.Open = append(p.Open, OpenAnswer{URL: base + path, Body: body})
			}
		}
	}
}

// ReadAttackRecords reads the records files (attacks-*.ndjson) of dir; a
// partial last line is being written and is skipped.
func ReadAttackRecords(dir string) ([]AttackRecord, error) {
	files, err := filepath.Glob(filepath.Join(dir, "attacks-*.ndjson"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var out []AttackRecord
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("chaos: records: %w", err)
		}
		data = data[:bytes.LastIndexByte(data, '\n')+1]
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
		for sc.Scan() {
			var r AttackRecord
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				return nil, fmt.Errorf("chaos: records %s: %w", path, err)
			}
			out = append(out, r)
		}
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}
