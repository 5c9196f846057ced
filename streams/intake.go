package streams

// Intake streams: the per-worker quotas of issue 29 (PROTOCOL.md §4.2).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/events"
)

// Quotas bound each worker's inputs with the server's own limits. A
// deployment with quotas gives every worker an intake stream of its own,
// <Prefix>_INTAKE_<worker>, which takes the worker's input subjects
// (tenure.in.worker.<worker>.>) with MaxBytes and MaxMsgs and discard new;
// the input stream takes no worker subject and sources every intake stream
// instead, so it stays one total order of every input, stored times and
// all. A worker's publish that would pass its intake's limits is refused by
// the server (a PubAck error "maximum bytes exceeded" or "maximum messages
// exceeded", the worker SDK's ErrQuota), whatever the other workers do.
//
// The live coordinator empties each intake stream behind its fold (a purge
// up to the last input of the worker it has folded), at most BytesPerS and
// MsgsPerS a second per worker (token buckets on its clock, with the
// intake's limits as their bursts): a worker's backlog of inputs not yet
// folded is bounded by its intake's limits, and its long-run rate by the
// two rates. While storage is short (coordinator.Config.Reserve) it purges
// nothing, so that every intake fills and refuses, and the coordinator's
// own ticks and decisions keep the room that is left.
type Quotas struct {
	Workers   []string // the workers, each with an intake stream; [A-Za-z0-9_-], 1 to 64 long
	MaxBytes  int64    // each intake's MaxBytes (its backlog in bytes), > 0
	MaxMsgs   int64    // each intake's MaxMsgs (its backlog in inputs), > 0
	BytesPerS int64    // each worker's drain rate in bytes a second, > 0
	MsgsPerS  int64    // each worker's drain rate in inputs a second, > 0
}

// Default quotas of tenure auth init, sized so that one worker using all
// of its quota costs the others little on the machine BENCHMARKS.md
// describes (two cores, one disk, sync always; `tenure bench --only
// flood`, flood_honest_rtt_p99_ratio): 250 inputs a second (a queue worker
// running about 100 jobs a second, or one renewing tens of thousands of
// leases in batches of 256), 256 KiB a second, and a backlog of 500 inputs
// or 1 MiB. Every input a worker stores is written (and with sync always
// fsynced) three times: in its intake, in the input stream, and as its
// verdict; a quota is a share of that. A bigger server, or one that syncs
// on an interval, takes more (tenure auth init's --quota-* flags).
const (
	DefaultQuotaBytes     = 1 << 20
	DefaultQuotaMsgs      = 500
	DefaultQuotaBytesPerS = 256 << 10
	DefaultQuotaMsgsPerS  = 250
)

// Metadata of an intake stream: its worker and its drain rates.
const (
	MetaIntakeWorker    = "tenure_intake_worker"
	MetaIntakeBytesPerS = "tenure_intake_bytes_per_s"
	MetaIntakeMsgsPerS  = "tenure_intake_msgs_per_s"
)

// Validate checks q's fields.
func (q Quotas) Validate() error {
	if q.MaxBytes <= 0 || q.MaxMsgs <= 0 || q.BytesPerS <= 0 || q.MsgsPerS <= 0 {
		return fmt.Errorf("streams: quotas: every limit must be positive, got max_bytes %d, max_msgs %d, bytes_per_s %d, msgs_per_s %d",
			q.MaxBytes, q.MaxMsgs, q.BytesPerS, q.MsgsPerS)
	}
	if len(q.Workers) == 0 {
		return errors.New("streams: quotas: no workers")
	}
	for _, w := range q.Workers {
		if !validPrefix(w) {
			return fmt.Errorf("streams: quotas: invalid worker id %q: want 1 to 64 of [A-Za-z0-9_-]", w)
		}
	}
	return nil
}

// IntakeStream is the name of worker's intake stream, "TENURE_INTAKE_w1"
// for worker w1 by default.
func (t Topology) IntakeStream(worker string) string { return t.base() + "_INTAKE_" + worker }

// IntakeWorker returns the worker whose intake stream name is, if it is one
// of t's.
func (t Topology) IntakeWorker(name string) (string, bool) {
	w, ok := strings.CutPrefix(name, t.base()+"_INTAKE_")
	return w, ok && validPrefix(w)
}

// IntakeConfig is the configuration of worker's intake stream under q.
func (t Topology) IntakeConfig(worker string, q Quotas) jetstream.StreamConfig {
	t = t.withDefaults()
	return jetstream.StreamConfig{
		Name:        t.IntakeStream(worker),
		Description: "Tenure intake of worker " + worker + ": its inputs, bounded, until the coordinator has folded them",
		Subjects:    []string{events.InputPrefix + "." + events.RoleWorker.String() + "." + worker + ".>"},
		Metadata: map[string]string{
			MetaIntakeWorker:    worker,
			MetaIntakeBytesPerS: strconv.FormatInt(q.BytesPerS, 10),
			MetaIntakeMsgsPerS:  strconv.FormatInt(q.MsgsPerS, 10),
		},
		Retention:         jetstream.LimitsPolicy,
		MaxConsumers:      -1,
		MaxMsgs:           q.MaxMsgs,
		MaxBytes:          q.MaxBytes,
		MaxMsgsPerSubject: -1,
		Discard:           jetstream.DiscardNew,
		Storage:           t.Storage,
		Replicas:          t.Replicas,
		Duplicates:        t.DupeWindow,
		DenyDelete:        true,
		DenyPurge:         false, // the coordinator purges what it has folded
	}
}

// IntakeSubjects are the subjects of an input stream that sources intake
// streams: every input subject but the workers'.
func (t Topology) IntakeSubjects() []string {
	return []string{events.InputPrefix + "." + events.RoleOps.String() + ".>", events.InputPrefix + "." + events.RoleCoord.String() + ".>"}
}

// Intake is what a coordinator needs of one intake stream.
type Intake struct {
	Worker    string
	Stream    string
	MaxBytes  int64
	MaxMsgs   int64
	BytesPerS int64
	MsgsPerS  int64
}

// Intakes returns the intake streams cfg, the input stream's configuration,
// sources (none: a deployment without quotas), sorted by worker.
func (t Topology) Intakes(cfg jetstream.StreamConfig) []string {
	var ws []string
	for _, s := range cfg.Sources {
		if w, ok := t.IntakeWorker(s.Name); ok {
			ws = append(ws, w)
		}
	}
	slices.Sort(ws)
	return ws
}

// quotaInput reports whether cfg is an input stream of t in the form
// quotas give it: IntakeSubjects as subjects, and sources that are all
// plain intake streams of t (no filter, no transform, no other account or
// domain), at least one.
func (t Topology) quotaInput(cfg jetstream.StreamConfig) error {
	bad := func(field string, w, g any) error {
		return &ConfigMismatchError{Stream: cfg.Name, Field: field, Want: fmt.Sprint(w), Got: fmt.Sprint(g)}
	}
	if !sameSet(cfg.Subjects, t.IntakeSubjects()) {
		return bad("Subjects", t.IntakeSubjects(), cfg.Subjects)
	}
	if len(cfg.Sources) == 0 {
		return bad("Sources", "the intake streams", "none")
	}
	for _, s := range cfg.Sources {
		if _, ok := t.IntakeWorker(s.Name); !ok {
			return bad("Sources", "intake streams "+t.IntakeStream("<worker>")+" only", s.Name)
		}
		if s.FilterSubject != "" || len(s.SubjectTransforms) > 0 || s.External != nil || s.Domain != "" || s.OptStartSeq > 0 || s.OptStartTime != nil {
			return bad("Sources", "plain sources (no filter, transform, start or external)", s.Name)
		}
	}
	return nil
}

// CheckIntake checks an intake stream's configuration as the coordinator
// finds it: the worker's subjects only, limits that bound it with discard
// new, no deletes of single messages, nothing that would let messages be
// replaced or injected; and it returns what the coordinator needs of it.
func (t Topology) CheckIntake(worker string, got jetstream.StreamConfig) (Intake, error) {
	t = t.withDefaults()
	want := t.IntakeConfig(worker, Quotas{})
	bad := func(field string, w, g any) (Intake, error) {
		return Intake{}, &ConfigMismatchError{Stream: want.Name, Field: field, Want: fmt.Sprint(w), Got: fmt.Sprint(g)}
	}
	rate := func(key string) int64 {
		n, err := strconv.ParseInt(got.Metadata[key], 10, 64)
		if err != nil || n <= 0 {
			return 0
		}
		return n
	}
	in := Intake{Worker: worker, Stream: want.Name, MaxBytes: got.MaxBytes, MaxMsgs: got.MaxMsgs,
		BytesPerS: rate(MetaIntakeBytesPerS), MsgsPerS: rate(MetaIntakeMsgsPerS)}
	switch {
	case !sameSet(got.Subjects, want.Subjects):
		return bad("Subjects", want.Subjects, got.Subjects)
	case got.Metadata[MetaIntakeWorker] != worker:
		return bad("Metadata["+MetaIntakeWorker+"]", worker, got.Metadata[MetaIntakeWorker])
	case in.BytesPerS == 0 || in.MsgsPerS == 0:
		return bad("Metadata", "positive drain rates", got.Metadata)
	case got.MaxBytes <= 0 || got.MaxMsgs <= 0:
		return bad("MaxBytes/MaxMsgs", "positive", fmt.Sprint(got.MaxBytes, "/", got.MaxMsgs))
	case got.Discard != jetstream.DiscardNew:
		return bad("Discard", jetstream.DiscardNew, got.Discard)
	case got.Retention != jetstream.LimitsPolicy:
		return bad("Retention", jetstream.LimitsPolicy, got.Retention)
	case got.MaxAge > 0:
		return bad("MaxAge", "unlimited", got.MaxAge)
	case !got.DenyDelete:
		return bad("DenyDelete", true, got.DenyDelete)
	case got.Sealed:
		return bad("Sealed", false, got.Sealed)
	case got.AllowRollup || got.AllowMsgTTL || got.AllowMsgSchedules || got.AllowMsgCounter:
		return bad("AllowRollup/AllowMsgTTL/AllowMsgSchedules/AllowMsgCounter", false, true)
	case got.Mirror != nil || len(got.Sources) > 0 || got.SubjectTransform != nil:
		return bad("Mirror/Sources/SubjectTransform", "none", "set")
	case got.NoAck:
		return bad("NoAck", false, got.NoAck)
	case got.Storage != want.Storage:
		return bad("Storage", want.Storage, got.Storage)
	case got.Replicas < want.Replicas:
		return bad("Replicas", fmt.Sprintf(">= %d", want.Replicas), got.Replicas)
	}
	return in, nil
}

// ApplyQuotas gives t's input stream quotas (PROTOCOL.md §4.2): it creates
// the intake stream of every worker of q that has none, and sets the input
// stream's subjects to IntakeSubjects and its sources to every intake
// stream (those it had and q's). It is the administrator's (tenure genesis
// --quotas): it needs stream create and update. It is idempotent, and
// may be run again with more workers. An input stream still in genesis is
// widened by it straight to the quota form, so that no worker input is
// ever stored but through an intake, once its intake streams exist (the
// input stream then sources them at once); one past genesis that takes
// every input subject is narrowed first (a worker's publish between the
// two steps finds no stream, a transient error its SDK retries), since
// the intake streams' subjects may not overlap its own. An intake stream that
// exists is checked (CheckIntake), not changed. Quotas are for
// unpartitioned deployments.
func ApplyQuotas(ctx context.Context, js jetstream.JetStream, t Topology, q Quotas) (jetstream.Stream, error) {
	if err := t.validate(); err != nil {
		return nil, err
	}
	if err := q.Validate(); err != nil {
		return nil, err
	}
	if t.Partition.Partitioned() {
		return nil, errors.New("streams: quotas are for unpartitioned deployments")
	}
	t = t.withDefaults()
	s, err := js.Stream(ctx, t.InputStream())
	if err != nil {
		return nil, fmt.Errorf("streams: look up stream %s: %w", t.InputStream(), Classify(err))
	}
	cfg := s.CachedInfo().Config
	if !t.InGenesis(cfg) && !sameSet(cfg.Subjects, t.IntakeSubjects()) && !sameSet(cfg.Subjects, t.InputConfig().Subjects) {
		return nil, &ConfigMismatchError{Stream: cfg.Name, Field: "Subjects", Want: fmt.Sprint(t.InputConfig().Subjects), Got: fmt.Sprint(cfg.Subjects)}
	}
	if cfg.Replicas > 1 {
		return nil, fmt.Errorf("%w: stream %s has %d replicas", ErrQuotasReplicated, cfg.Name, cfg.Replicas)
	}
	workers := slices.Clone(q.Workers)
	workers = append(workers, t.Intakes(cfg)...)
	slices.Sort(workers)
	workers = slices.Compact(workers)
	// The intake streams' subjects may not overlap the input stream's.
	// While it is in genesis, or already in the quota form, they do not:
	// the intakes are made first, so that the input stream sources them
	// from its update on. One that takes every input subject is narrowed
	// first, in one update with its sources, so that no configuration
	// between the two forms is ever seen; the intakes are made after it,
	// and nats-server sets up a source it could not find again only after
	// its retry back-off (about 10 s), the time a live deployment's
	// workers' inputs then wait in their intakes: ApplyQuotas returns
	// only once every intake is sourced (WaitSourced).
	update := func() error {
		if sameSet(cfg.Subjects, t.IntakeSubjects()) && sameSet(t.Intakes(cfg), workers) && len(cfg.Sources) == len(workers) {
			return nil
		}
		var srcs []*jetstream.StreamSource
		for _, w := range workers {
			srcs = append(srcs, &jetstream.StreamSource{Name: t.IntakeStream(w)})
		}
		cfg.Subjects, cfg.Sources = t.IntakeSubjects(), srcs
		if s, err = js.UpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("streams: give stream %s the subjects %v and the intake streams as sources: %w", t.InputStream(), cfg.Subjects, Classify(err))
		}
		return nil
	}
	narrowFirst := !t.InGenesis(cfg) && !sameSet(cfg.Subjects, t.IntakeSubjects())
	if narrowFirst {
		if err := update(); err != nil {
			return nil, err
		}
	}
	for _, w := range workers {
		want := t.IntakeConfig(w, q)
		is, err := js.Stream(ctx, want.Name)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
			if is, err = js.CreateStream(ctx, want); errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				is, err = js.Stream(ctx, want.Name)
			}
			if err != nil {
				return nil, fmt.Errorf("streams: create intake stream %s: %w", want.Name, Classify(err))
			}
		case err != nil:
			return nil, fmt.Errorf("streams: look up stream %s: %w", want.Name, Classify(err))
		}
		if _, err := t.CheckIntake(w, is.CachedInfo().Config); err != nil {
			return nil, err
		}
	}
	if !narrowFirst {
		if err := update(); err != nil {
			return nil, err
		}
	}
	if err := checkStream(t.InputConfig(), s.CachedInfo().Config, nil); err != nil {
		return nil, err
	}
	// Return once the input stream sources every intake: an intake
	// made after the update (narrowFirst), or a first attempt that failed
	// under load, leaves its workers' inputs undecided for nats-server's
	// retry back-off (10 s and more), which the caller must hear of
	// rather than its workers' leases.
	wctx, cancel := context.WithTimeout(ctx, SourcesTimeout)
	defer cancel()
	if err := WaitSourced(wctx, s, t, workers); err != nil {
		return nil, err
	}
	return s, nil
}

// SourcesTimeout bounds ApplyQuotas' wait for the input stream to source
// every intake: longer than nats-server's first retry of a source it
// could not set up (about 12 s).
const SourcesTimeout = 30 * time.Second

// ErrNotSourced is WaitSourced's error when an intake stream is not yet
// sourced by the input stream: its worker's inputs are stored and wait
// in the intake until nats-server sets the source up.
var ErrNotSourced = errors.New("streams: the input stream does not source every intake stream yet")

// WaitSourced waits until input stream s has set up the source of the
// intake of each of workers (the server has heard from it: its source
// information's Active is not -1), or ctx ends.
func WaitSourced(ctx context.Context, s jetstream.Stream, t Topology, workers []string) error {
	t = t.withDefaults()
	var known []string // what the last info that answered left pending (nil: none answered)
	for {
		info, err := s.Info(ctx)
		var pending []string
		if err == nil {
			active := make(map[string]bool, len(info.Sources))
			for _, si := range info.Sources {
				if si != nil && si.Active >= 0 && si.Error == nil {
					active[si.Name] = true
				}
			}
			for _, w := range workers {
				if !active[t.IntakeStream(w)] {
					pending = append(pending, t.IntakeStream(w))
				}
			}
			if len(pending) == 0 {
				return nil
			}
			known = pending
		}
		select {
		case <-ctx.Done():
			if err != nil && known != nil {
				pending = known // (the last info timed out with ctx: say what the one before said)
			} else if err != nil {
				return fmt.Errorf("%w: stream %s info: %w", ErrNotSourced, t.InputStream(), Classify(err))
			}
			return fmt.Errorf("%w: %s not sourced by %s (nats-server retries a source it could not set up after a back-off of 10 s and more; their workers' inputs wait in them meanwhile)",
				ErrNotSourced, strings.Join(pending, ", "), t.InputStream())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ErrQuotasReplicated is ApplyQuotas refusing quotas for a replicated
// input stream (a NATS cluster): when a node fails, nats-server sets up
// the input stream's sources again only after its retry back-off (10 s,
// then longer, up to two minutes), and meanwhile every worker's inputs
// wait in their intakes, undecided: leases shorter than that are lost.
// The chaos suite's cluster environment found it (a node SIGKILLed, the
// workers' inputs sourced again after more than 20 s). A clustered
// deployment runs without quotas until that is solved (PROTOCOL.md §4.2).
var ErrQuotasReplicated = errors.New("streams: quotas are not applied to a replicated input stream: a node failure stalls the sourcing of every worker's intake for 10 s to 2 min")

// HeaderStreamSource is the header nats-server stores with a message it
// sourced from another stream (its origin stream and sequence).
const HeaderStreamSource = "Nats-Stream-Source"

// SourceSeq returns the intake sequence of a sourced input from its
// Nats-Stream-Source header value (nats-server 2.10 form: "<stream> <seq>
// <filter> <transform> <subject>"), when the stream is the intake stream
// of worker, the input's actor; 0 otherwise. The server refuses the header
// on a message published directly, and replaces it on one it sources.
func (t Topology) SourceSeq(header, worker string) uint64 {
	name, rest, ok := strings.Cut(header, " ")
	if !ok || name != t.IntakeStream(worker) {
		return 0
	}
	seq, _, _ := strings.Cut(rest, " ")
	n, err := strconv.ParseUint(seq, 10, 64)
	if err != nil {
		return 0
	}
	return n
}
