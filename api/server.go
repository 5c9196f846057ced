package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/streams"
)

// Config configures a Server.
type Config struct {
	// Conn is the connection the Server reads the decision streams with
	// (required); the endpoints are served on the micro service given to
	// AddEndpoints, whatever its connection.
	Conn *nats.Conn
	// Topology names the streams (streams.Topology{} by default); its
	// Partition is ignored: Partitions says which streams there are.
	Topology streams.Topology
	// Partitions is the partition count of the deployment (0:
	// unpartitioned), as streams.Discover finds it: the Server follows
	// every partition's decision stream into one model.
	Partitions uint32
	// Logger receives the Server's log (nil: none).
	Logger *slog.Logger
	// Now is the clock readiness, announcements and rates are judged by
	// (nil: time.Now).
	Now func() time.Time
}

// Server is the API: a read model of the decision streams (Run) answering
// requests on the endpoints of a NATS micro service (AddEndpoints).
type Server struct {
	cfg     Config
	topos   []streams.Topology
	js      jetstream.JetStream
	log     *slog.Logger
	model   *Model
	results *Results
	dropped atomic.Uint64 // messages that were no request (no reply subject, a consumer's delivery)
	refused atomic.Uint64 // requests answered with an error of the request (4xx)
}

// New checks cfg and builds the Server; it reads nothing yet.
func New(cfg Config) (*Server, error) {
	if cfg.Conn == nil {
		return nil, errors.New("api: no NATS connection")
	}
	if cfg.Partitions > events.MaxPartitions {
		return nil, fmt.Errorf("api: %d partitions: at most %d", cfg.Partitions, events.MaxPartitions)
	}
	cfg.Topology.Partition = events.Partition{}
	if err := cfg.Topology.Validate(); err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	js, err := jetstream.New(cfg.Conn)
	if err != nil {
		return nil, fmt.Errorf("api: jetstream: %w", err)
	}
	m := NewModel(cfg.Partitions)
	return &Server{cfg: cfg, topos: cfg.Topology.Partitions(cfg.Partitions), js: js, log: cfg.Logger, model: m,
		results: NewResults(js, cfg.Topology, m)}, nil
}

// Model is the Server's read model, which Run keeps up to date. The web
// board of the same process shares it (ui.Config.Model): attach its View
// before Run.
func (s *Server) Model() *Model { return s.model }

// Stats are the Server's counters, as its endpoints' stats show them.
type Stats struct {
	Jobs     int    `json:"jobs"`    // jobs in the read model
	Queues   int    `json:"queues"`  // queues known
	Dropped  uint64 `json:"dropped"` // messages on the API's subjects that were no request, ignored
	Refused  uint64 `json:"refused"` // requests refused (a bad, too large or unknown request)
	Bad      uint64 `json:"bad"`     // undecodable decisions skipped
	CaughtUp bool   `json:"caught_up"`
	Seq      uint64 `json:"seq"`
}

// Stats returns the Server's counters.
func (s *Server) Stats() Stats {
	m := s.model
	m.mu.RLock()
	defer m.mu.RUnlock()
	p := m.position(time.Now())
	return Stats{Jobs: len(m.jobs), Queues: m.queues.Len(), Dropped: s.dropped.Load(), Refused: s.refused.Load(),
		Bad: m.bad, CaughtUp: p.CaughtUp, Seq: p.Seq}
}

// Run follows every partition's decision stream into the model until ctx
// ends (Follow: from its first decision, or from the stored snapshot when
// its first segments were removed), waiting for the streams to exist and
// resuming each partition where it stopped after an error.
func (s *Server) Run(ctx context.Context) error {
	Follow(ctx, s.js, s.cfg.Topology, s.model, s.log.With("in", "api"))
	return nil
}

// Endpoint names of the micro service (`nats micro info tenure` lists
// them), with their subjects.
var endpoints = []struct{ name, subject string }{
	{"api-job-get", SubjectJob},
	{"api-job-list", SubjectJobs},
	{"api-queue-get", SubjectQueue},
	{"api-queue-list", SubjectQueues},
	{"api-job-result", SubjectResult},
	{"api-schedule-list", SubjectSchedules},
}

// Pending limits of each endpoint's subscription (AddEndpoints).
const (
	PendingMsgs  = 1024
	PendingBytes = 4 << 20
)

// AddEndpoints adds the API's endpoints to svc (the coordinators'
// "tenure" micro service, in tenure serve), under the default queue
// group: several servers share the requests. Each endpoint's subscription
// holds at most PendingMsgs messages (PendingBytes bytes) not yet
// handled: beyond, a flood aimed at its subject (a push consumer
// delivering there) is dropped by the client library and counted, not
// buffered.
func (s *Server) AddEndpoints(svc micro.Service) error {
	handlers := []func(micro.Request){s.serveJob, s.serveJobs, s.serveQueue, s.serveQueues, s.serveResult, s.serveSchedules}
	for i, e := range endpoints {
		h := handlers[i]
		if err := svc.AddEndpoint(e.name, micro.HandlerFunc(func(r micro.Request) { s.handle(r, h) }),
			micro.WithEndpointSubject(e.subject), micro.WithEndpointPendingLimits(PendingMsgs, PendingBytes)); err != nil {
			return fmt.Errorf("api: endpoint %s: %w", e.subject, err)
		}
	}
	return nil
}

// EndpointStats is the stats of one of the API's endpoints in the micro
// service (its StatsHandler), or nil for another endpoint.
func (s *Server) EndpointStats(e *micro.Endpoint) any {
	for _, x := range endpoints {
		if x.name == e.Name {
			return s.Stats()
		}
	}
	return nil
}

// handle checks that r is a request at all before h answers it: a message
// without a reply subject, or one whose reply subject is the JetStream
// API's (a push consumer's delivery, which any client allowed a consumer
// can aim at any subject of the account: PROTOCOL.md §3.4), is dropped
// unanswered; a body over MaxRequestBytes is refused unread.
func (s *Server) handle(r micro.Request, h func(micro.Request)) {
	reply := r.Reply()
	if reply == "" || strings.HasPrefix(reply, "$JS.") {
		s.dropped.Add(1)
		return
	}
	if n := len(r.Data()); n > MaxRequestBytes {
		s.fail(r, 413, "request of "+strconv.Itoa(n)+" bytes: at most "+strconv.Itoa(MaxRequestBytes))
		return
	}
	h(r)
}

// fail answers r with an error of the request (code 4xx) or of the server.
func (s *Server) fail(r micro.Request, code int, desc string) {
	if code < 500 {
		s.refused.Add(1)
	}
	b, _ := json.Marshal(ErrorReply{Error: ErrorBody{Code: code, Description: desc}})
	_ = r.Error(strconv.Itoa(code), desc, b)
}

func (s *Server) respond(r micro.Request, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		s.fail(r, 500, "encoding the answer: "+err.Error())
		return
	}
	// The bounds keep every answer far below NATS's default payload limit
	// (1 MiB); a server configured with a much smaller one would refuse a
	// long page: say so rather than leave the request to time out. (The
	// service's connection is to the server of Config.Conn.)
	if mp := s.cfg.Conn.MaxPayload(); mp > 0 && int64(len(b)) > mp {
		s.fail(r, 500, "the answer of "+strconv.Itoa(len(b))+" bytes is over the NATS server's payload limit of "+strconv.FormatInt(mp, 10)+": ask for a smaller limit")
		return
	}
	_ = r.Respond(b)
}

// decode reads r's body into v: one JSON object with only v's fields (an
// empty body is {}).
func decode(r micro.Request, v any) error {
	data := bytes.TrimSpace(r.Data())
	if len(data) == 0 {
		data = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("the body is not a request of this endpoint: %v", err)
	}
	if dec.More() {
		return errors.New("the body holds more than one JSON value")
	}
	return nil
}

func checkToken(field, v string, optional bool) error {
	if v == "" && optional {
		return nil
	}
	if !events.ValidToken(v) {
		return fmt.Errorf("%s %q: want 1 to %d of [A-Za-z0-9_-], not %q", field, v, events.MaxTokenLen, events.NoJob)
	}
	return nil
}

// limit is l within 1..most, 0 being def; a negative one is an error.
func limit(l, def, most int) (int, error) {
	switch {
	case l < 0:
		return 0, fmt.Errorf("limit %d: want 0 (the default, %d) to %d", l, def, most)
	case l == 0:
		return def, nil
	}
	return min(l, most), nil
}

func (s *Server) serveJob(r micro.Request) {
	var q JobRequest
	if err := decode(r, &q); err != nil {
		s.fail(r, 400, err.Error())
		return
	}
	if err := checkToken("job", q.Job, false); err != nil {
		s.fail(r, 400, err.Error())
		return
	}
	rep, ok := s.model.Job(q.Job, s.cfg.Now())
	switch {
	case ok:
		if rep.WorkerResult == nil {
			s.fillResult(&rep, q.Job)
		}
		s.respond(r, rep)
	case !rep.CaughtUp:
		s.fail(r, 503, "job "+q.Job+" not read yet: the read model is catching up with the decision stream (at "+strconv.FormatUint(rep.Seq, 10)+")")
	default:
		s.fail(r, 404, "no job "+q.Job+" (never submitted, offered nor acquired, or retired)")
	}
}

func (s *Server) serveJobs(r micro.Request) {
	var q JobsRequest
	if err := decode(r, &q); err != nil {
		s.fail(r, 400, err.Error())
		return
	}
	err := errors.Join(checkToken("queue", q.Queue, true), checkToken("after", q.After, true))
	if _, ok := events.ParseState(q.State); q.State != "" && !ok {
		err = errors.Join(err, fmt.Errorf("state %q: not a job state (QUEUED, OFFERED, ACTIVE, DEAD, COMPLETED, ...)", q.State))
	}
	var lerr error
	q.Limit, lerr = limit(q.Limit, DefaultJobsLimit, MaxJobsLimit)
	if err = errors.Join(err, lerr); err != nil {
		s.fail(r, 400, strings.ReplaceAll(err.Error(), "\n", "; "))
		return
	}
	rep := s.model.List(q, s.cfg.Now())
	s.fillDetails(rep.Jobs)
	s.respond(r, rep)
}

// resultTimeout bounds the reads of workers' results for one answer.
const resultTimeout = 5 * time.Second

// fillResult adds the worker's account of job's latest result to rep, if
// the job has a result and it can be read.
func (s *Server) fillResult(rep *JobReply, job string) {
	ctx, cancel := context.WithTimeout(context.Background(), resultTimeout)
	defer cancel()
	got, err := s.results.Fill(ctx, []string{job})
	if err != nil {
		s.log.Warn("api: reading a worker's result", "job", job, "err", err)
	}
	if w, ok := got[job]; ok {
		rep.WorkerResult = &w
	}
}

// fillDetails adds to the jobs of a page the detail of their latest
// results (read once, then kept in the model).
func (s *Server) fillDetails(jobs []JobSummary) {
	var ids []string
	for _, j := range jobs {
		if j.ResultInput != 0 && j.ResultDetail == "" {
			ids = append(ids, j.ID)
		}
	}
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), resultTimeout)
	defer cancel()
	got, err := s.results.Fill(ctx, ids)
	if err != nil {
		s.log.Warn("api: reading workers' results", "err", err)
	}
	for i := range jobs {
		if w, ok := got[jobs[i].ID]; ok && w.Input == jobs[i].ResultInput {
			jobs[i].ResultDetail = w.Detail
		}
	}
}

func (s *Server) serveResult(r micro.Request) {
	var q ResultRequest
	if err := decode(r, &q); err != nil {
		s.fail(r, 400, err.Error())
		return
	}
	if err := checkToken("job", q.Job, false); err != nil {
		s.fail(r, 400, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), resultTimeout)
	defer cancel()
	w, ok, err := s.results.Read(ctx, q.Job, q.Input)
	switch {
	case ok:
		s.respond(r, ResultReply{Job: q.Job, Partition: s.model.partition(events.PartitionOf(q.Job, s.cfg.Partitions)).Token(), Result: w})
	case errors.Is(err, ErrNotAResult), errors.Is(err, ErrInputMissing):
		s.fail(r, 404, err.Error())
	case err != nil:
		s.fail(r, 500, err.Error())
	default:
		if _, known := s.model.Job(q.Job, s.cfg.Now()); known {
			s.fail(r, 404, "job "+q.Job+" has no result yet")
		} else {
			s.fail(r, 404, "no job "+q.Job+" in the read model: give the result's input")
		}
	}
}

func (s *Server) serveQueue(r micro.Request) {
	var q QueueRequest
	if err := decode(r, &q); err != nil {
		s.fail(r, 400, err.Error())
		return
	}
	if err := checkToken("queue", q.Queue, false); err != nil {
		s.fail(r, 400, err.Error())
		return
	}
	rep, ok := s.model.Queue(q.Queue, s.cfg.Now())
	switch {
	case ok:
		s.respond(r, rep)
	case !rep.CaughtUp:
		s.fail(r, 503, "queue "+q.Queue+" not read yet: the read model is catching up with the decision stream")
	default:
		s.fail(r, 404, "no queue "+q.Queue+" (no job of it kept, no worker announcing capacity on it)")
	}
}

func (s *Server) serveSchedules(r micro.Request) {
	var q SchedulesRequest
	if err := decode(r, &q); err != nil {
		s.fail(r, 400, err.Error())
		return
	}
	err := errors.Join(checkToken("queue", q.Queue, true), checkToken("after", q.After, true))
	var lerr error
	q.Limit, lerr = limit(q.Limit, DefaultSchedulesLimit, MaxSchedulesLimit)
	if err = errors.Join(err, lerr); err != nil {
		s.fail(r, 400, strings.ReplaceAll(err.Error(), "\n", "; "))
		return
	}
	s.respond(r, s.model.Schedules(q, s.cfg.Now()))
}

func (s *Server) serveQueues(r micro.Request) {
	var q QueuesRequest
	if err := decode(r, &q); err != nil {
		s.fail(r, 400, err.Error())
		return
	}
	err := checkToken("after", q.After, true)
	var lerr error
	q.Limit, lerr = limit(q.Limit, DefaultQueuesLimit, MaxQueuesLimit)
	if err = errors.Join(err, lerr); err != nil {
		s.fail(r, 400, strings.ReplaceAll(err.Error(), "\n", "; "))
		return
	}
	s.respond(r, s.model.Queues(q, s.cfg.Now()))
}
