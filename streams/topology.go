package streams

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

// Defaults applied to the zero fields of a Topology.
const (
	DefaultPrefix     = "TENURE"
	DefaultReplicas   = 1
	DefaultDupeWindow = 2 * time.Minute
)

// Topology names and shapes Tenure's streams and buckets. The zero value is
// the default topology: prefix "TENURE", one replica, file storage, a
// two-minute duplicate window.
type Topology struct {
	Prefix     string                // stream name prefix, default DefaultPrefix; [A-Za-z0-9_-] only
	Replicas   int                   // default 1; at most 5
	Storage    jetstream.StorageType // default jetstream.FileStorage (the zero value)
	DupeWindow time.Duration         // duplicate window of both streams, default DefaultDupeWindow

	// Partition is the partition of a partitioned deployment this topology
	// holds (see events.Partition); the zero value is the unpartitioned
	// deployment. A partition's streams and buckets are named
	// <Prefix>_P<index>_IN, ..., its streams hold the subjects of
	// events.Partition.InputFilter and DecisionFilter, and both record the
	// partition and the partition count in their metadata (MetaPartition,
	// MetaPartitions), which Ensure checks on existing streams.
	Partition events.Partition

	// LogRetention creates the input and decision streams so that
	// segments of them can be removed once archived and verified (package
	// archive, README.md "Retention of the log"): DenyPurge off, and
	// MetaLogRetention = LogRetentionArchive in their metadata. Everything
	// else stays locked down: no deletes of single messages, no roll-ups,
	// no limits, no TTLs; a purge stays an API call only an operator's
	// credentials may make (tenure auth init gives no worker, and not the
	// coordinator, the right). JetStream cannot cancel DenyPurge on an
	// existing stream, so this is chosen when the streams are created; on
	// existing streams Ensure refuses it when they were made without it.
	// Streams made with it are accepted by every check whether or not
	// the topology asks for it: the stream says how it was made.
	LogRetention bool
}

// Stream metadata of streams created for log retention (Topology.LogRetention).
const (
	MetaLogRetention    = "tenure_log_retention"
	LogRetentionArchive = "archive"
)

// Retained reports whether a stream was created for log retention: its
// metadata says so and it allows purges.
func Retained(cfg jetstream.StreamConfig) bool {
	return cfg.Metadata[MetaLogRetention] == LogRetentionArchive && !cfg.DenyPurge
}

// Stream metadata keys of a partitioned deployment's streams.
const (
	MetaPartition  = "tenure_partition"
	MetaPartitions = "tenure_partitions"
)

// Partitions returns the topologies of every partition of a deployment of
// count partitions with t's prefix and settings (count 0: t itself,
// unpartitioned).
func (t Topology) Partitions(count uint32) []Topology {
	if count == 0 {
		t.Partition = events.Partition{}
		return []Topology{t}
	}
	ts := make([]Topology, count)
	for i := range ts {
		ts[i] = t
		ts[i].Partition = events.Partition{Index: uint32(i), Count: count}
	}
	return ts
}

func (t Topology) withDefaults() Topology {
	if t.Prefix == "" {
		t.Prefix = DefaultPrefix
	}
	if t.Replicas == 0 {
		t.Replicas = DefaultReplicas
	}
	if t.DupeWindow == 0 {
		t.DupeWindow = DefaultDupeWindow
	}
	return t
}

// Validate checks the topology's fields (Ensure and Open do it too).
func (t Topology) Validate() error { return t.validate() }

func (t Topology) validate() error {
	t = t.withDefaults()
	if !validPrefix(t.Prefix) {
		return fmt.Errorf("streams: invalid topology prefix %q: want 1 to 64 of [A-Za-z0-9_-]", t.Prefix)
	}
	if t.Replicas < 1 || t.Replicas > 5 {
		return fmt.Errorf("streams: invalid topology replicas %d: want 1 to 5", t.Replicas)
	}
	if t.Storage != jetstream.FileStorage && t.Storage != jetstream.MemoryStorage {
		return fmt.Errorf("streams: invalid topology storage %v", t.Storage)
	}
	if t.DupeWindow < 0 {
		return fmt.Errorf("streams: invalid topology duplicate window %v", t.DupeWindow)
	}
	if !t.Partition.Valid() {
		return fmt.Errorf("streams: invalid topology %s: want an index below a count of 1 to %d", t.Partition, events.MaxPartitions)
	}
	return nil
}

func validPrefix(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// base is the prefix of every name: Prefix, or Prefix_P<index> for a partition.
func (t Topology) base() string {
	t = t.withDefaults()
	if t.Partition.Partitioned() {
		return t.Prefix + "_P" + t.Partition.Token()
	}
	return t.Prefix
}

// InputStream is the name of the input stream, "TENURE_IN" by default
// ("TENURE_P2_IN" for partition 2).
func (t Topology) InputStream() string { return t.base() + "_IN" }

// DecisionStream is the name of the decision stream, "TENURE_OUT" by default.
func (t Topology) DecisionStream() string { return t.base() + "_OUT" }

// LeaderBucket is the name of the leader KV bucket, "TENURE_LEADER" by
// default (its stream is "KV_TENURE_LEADER").
func (t Topology) LeaderBucket() string { return t.base() + "_LEADER" }

// WorkerAPIPrefix is the JetStream API prefix of a worker in an account of
// its own (tenure auth init): "JS.<Prefix>.API" ("JS.TENURE.API" by
// default). Its account imports the few JetStream API subjects it needs from
// the deployment's account under this prefix (a JetStream client made with
// jetstream.NewWithAPIPrefix uses it); the worker's own account has no
// JetStream, so the plain $JS.API subjects answer "JetStream not enabled
// for account" there. It is the same for every partition.
func (t Topology) WorkerAPIPrefix() string { return "JS." + t.withDefaults().Prefix + ".API" }

// HeadSubjectPrefix is the subject of an unpartitioned deployment's signed
// chain heads; partition k's are HeadSubjectPrefix.<k> (HeadSubject).
// HeadFilters match both.
const HeadSubjectPrefix = "tenure.heads"

// HeadFilters are the subject filters of every deployment's chain heads:
// tenure.heads and tenure.heads.* (an auditor subscribes to both).
func HeadFilters() []string { return []string{HeadSubjectPrefix, HeadSubjectPrefix + ".*"} }

// HeadSubject is the core NATS subject on which the live coordinator of
// this topology publishes its signed chain heads (package heads,
// PROTOCOL.md §20.3): "tenure.heads", or "tenure.heads.<k>" for partition
// k, whose heads name its own decision stream. Like the input and
// decision subjects, it does not depend on Prefix.
func (t Topology) HeadSubject() string {
	if t.Partition.Partitioned() {
		return HeadSubjectPrefix + "." + t.Partition.Token()
	}
	return HeadSubjectPrefix
}

// SnapshotBucket is the name of the snapshot Object Store bucket,
// "TENURE_SNAPSHOTS" by default (its stream is "OBJ_TENURE_SNAPSHOTS").
func (t Topology) SnapshotBucket() string { return t.base() + "_SNAPSHOTS" }

// InputConfig is the configuration of the input stream once its genesis is
// over: every input subject of the partition (GenesisConfig is the one
// Ensure creates it with).
func (t Topology) InputConfig() jetstream.StreamConfig {
	return t.lockedDown(t.InputStream(), []string{t.Partition.InputFilter()},
		"Tenure inputs: append-only, every event as published")
}

// Genesis of the input stream. A brand-new deployment's log must start with
// the coordinator's rules input and default policy (PROTOCOL.md §1.1): an
// input stored before them would be judged by rules revision 1, under which
// anyone can name a lease. So Ensure creates a missing input stream with the
// genesis subjects only, those of a coordinator's rules and policy inputs
// (GenesisSubjects); any other input published then finds no stream (the
// publisher gets no responders, a transient error, and stores nothing). The
// live coordinator, once it has stored the rules and the default policy
// (or found them stored), widens the stream to InputConfig's subjects with
// EndGenesis, before it declares itself live. Ensure, Open and Verify
// accept a stream in genesis (a standby, a restarted serve, an auditor of
// a deployment whose coordinator has not gone live yet) but never widen
// it; any subject set other than the genesis one and InputConfig's is a
// *ConfigMismatchError. A stream that already has every input subject (any
// deployment made before genesis existed) is never narrowed.

// GenesisSubjects are the subjects of an input stream in genesis: the
// rules and policy inputs of any coordinator of the partition,
// tenure.in.coord.*._.rules and tenure.in.coord.*._.policy (with the
// partition token appended in a partitioned deployment). tenure auth init
// lets only coordinators publish tenure.in.coord.<id>.>.
func (t Topology) GenesisSubjects() []string {
	return []string{
		t.Partition.InputSubject(events.RoleCoord, "*", events.NoJob, events.VerbRules),
		t.Partition.InputSubject(events.RoleCoord, "*", events.NoJob, events.VerbPolicy),
	}
}

// GenesisConfig is the configuration Ensure creates a missing input stream
// with: InputConfig with GenesisSubjects as its subjects.
func (t Topology) GenesisConfig() jetstream.StreamConfig {
	cfg := t.InputConfig()
	cfg.Subjects = t.GenesisSubjects()
	return cfg
}

// InGenesis reports whether cfg, the configuration of t's input stream as
// the server has it, is that of a stream in genesis: its subjects are
// exactly GenesisSubjects.
func (t Topology) InGenesis(cfg jetstream.StreamConfig) bool {
	return sameSet(cfg.Subjects, t.GenesisSubjects())
}

// EndGenesis widens t's input stream, when it is in genesis, to every input
// subject of the partition (InputConfig's), changing nothing else of its
// configuration, and returns it with its new configuration checked. A
// stream that already has InputConfig's subjects is returned as it is (so
// EndGenesis is idempotent, and coordinators racing to it both succeed); a
// stream with any other subjects is a *ConfigMismatchError.
//
// Only once the rules input and the default policy are stored may it be
// called: by a coordinator whose credential may update the stream (Config
// Genesis GenesisSelf), or by the administrator's `tenure genesis`
// (coordinator.EndGenesis waits for them first); tests and tools that write
// a log of their own may, for their log. Ensure never does. It needs
// $JS.API.STREAM.UPDATE on the input stream, which tenure auth init grants
// the administrator only.
func EndGenesis(ctx context.Context, js jetstream.JetStream, t Topology) (jetstream.Stream, error) {
	if err := t.validate(); err != nil {
		return nil, err
	}
	t = t.withDefaults()
	want := t.InputConfig()
	s, err := js.Stream(ctx, want.Name)
	if err != nil {
		return nil, fmt.Errorf("streams: look up stream %s: %w", want.Name, Classify(err))
	}
	if got := s.CachedInfo().Config; t.InGenesis(got) {
		got.Subjects = want.Subjects
		if s, err = js.UpdateStream(ctx, got); err != nil {
			return nil, fmt.Errorf("streams: end the genesis of stream %s (widen its subjects to %v): %w", want.Name, want.Subjects, Classify(err))
		}
	}
	if err := checkStream(want, s.CachedInfo().Config, nil); err != nil {
		return nil, err
	}
	return s, nil
}

// DecisionConfig is the configuration Ensure creates the decision stream
// with: the input stream's lock-down, plus atomic batch publish.
func (t Topology) DecisionConfig() jetstream.StreamConfig {
	cfg := t.lockedDown(t.DecisionStream(), []string{t.Partition.DecisionFilter()},
		"Tenure decisions: append-only, written by the coordinator only")
	cfg.AllowAtomicPublish = true
	// Every worker may hold events.WorkerConsumers consumers on it: the
	// server's default of 1,000 consumers per stream would turn away
	// workers of a large deployment. (Each worker is bounded by its
	// permissions; this bounds the whole.)
	cfg.MaxConsumers = DecisionMaxConsumers
	return cfg
}

// DecisionMaxConsumers is the consumer limit of the decision streams
// Ensure creates (nats-server's default is 1,000 per stream): room for
// events.WorkerConsumers consumers of each of 20,000 workers, and the
// readers of the coordinators, dispatchers, operators and auditors. An
// existing stream keeps its own (raise it with nats stream edit
// --max-consumers).
const DecisionMaxConsumers = 100_000

// lockedDown is the configuration both streams share: limits retention with
// no limit at all, discard new, and every setting that lets a publisher or an
// API call remove or replace stored messages switched off.
func (t Topology) lockedDown(name string, subjects []string, description string) jetstream.StreamConfig {
	t = t.withDefaults()
	var meta map[string]string
	if t.Partition.Partitioned() {
		meta = map[string]string{
			MetaPartition:  t.Partition.Token(),
			MetaPartitions: strconv.FormatUint(uint64(t.Partition.Count), 10),
		}
	}
	if t.LogRetention {
		if meta == nil {
			meta = map[string]string{}
		}
		meta[MetaLogRetention] = LogRetentionArchive
	}
	return jetstream.StreamConfig{
		Metadata:          meta,
		Name:              name,
		Description:       description,
		Subjects:          subjects,
		Retention:         jetstream.LimitsPolicy,
		MaxConsumers:      -1,
		MaxMsgs:           -1,
		MaxBytes:          -1,
		MaxAge:            0,
		MaxMsgsPerSubject: -1,
		Discard:           jetstream.DiscardNew,
		Storage:           t.Storage,
		Replicas:          t.Replicas,
		Duplicates:        t.DupeWindow,
		DenyDelete:        true,
		DenyPurge:         !t.LogRetention,
		AllowRollup:       false,
		AllowMsgTTL:       false,
		AllowMsgSchedules: false,
		AllowMsgCounter:   false,
		AllowDirect:       true,
	}
}

// Handles are the live handles on a topology's streams and buckets.
type Handles struct {
	In        jetstream.Stream
	Out       jetstream.Stream
	Leader    jetstream.KeyValue
	Snapshots jetstream.ObjectStore
	// SnapshotStream is the snapshot bucket's stream (OBJ_<bucket>), whose
	// messages are the object's description and chunks: package snapshot
	// reads the chunks of one version by sequence.
	SnapshotStream jetstream.Stream
}

// ConfigMismatchError reports a stream that exists with a configuration less
// safe than the topology requires. Ensure does not change such a stream: an
// operator must fix it (or delete it, if it holds nothing worth keeping).
type ConfigMismatchError struct {
	Stream string // stream name, e.g. "TENURE_IN"
	Field  string // jetstream.StreamConfig field name, e.g. "DenyPurge"
	Want   string // what the topology requires
	Got    string // what the server has
}

// Error describes the mismatch, e.g. "streams: stream TENURE_IN: DenyPurge
// is false, want true".
func (e *ConfigMismatchError) Error() string {
	return fmt.Sprintf("streams: stream %s: %s is %s, want %s", e.Stream, e.Field, e.Got, e.Want)
}

// Ensure creates whatever of the topology is missing and returns handles on
// all of it. It is idempotent and safe to run from several processes at once.
//
// A missing input stream is created in genesis, with the coordinators' rules
// and policy subjects only (GenesisSubjects); the coordinator widens it once
// they are stored (EndGenesis). Ensure accepts an input stream in genesis,
// and never widens it.
//
// An existing stream is never updated. If its configuration differs from the
// topology in a way that matters for safety (the lock-down, limits, subjects,
// storage, fewer replicas, a shorter duplicate window, no publish acks, lazy
// persistence), Ensure returns a *ConfigMismatchError; other differences
// (description, AllowDirect, AllowAtomicPublish, ...) are left alone. Callers
// that rely on atomic batch publish should check
// Handles.Out.CachedInfo().Config.AllowAtomicPublish.
//
// The leader bucket keeps one value per key, and its values expire after
// leaderTTL, which must be positive; if the bucket exists with another TTL or
// history, Ensure updates it (the bucket holds only ephemeral leadership
// claims, and the decision stream, not the bucket, fences writers).
func Ensure(ctx context.Context, js jetstream.JetStream, t Topology, leaderTTL time.Duration) (*Handles, error) {
	if err := t.validate(); err != nil {
		return nil, err
	}
	if leaderTTL <= 0 {
		return nil, fmt.Errorf("streams: leader TTL must be positive, got %v", leaderTTL)
	}
	t = t.withDefaults()
	var h Handles
	var err error
	// A missing input stream is created in genesis (GenesisSubjects).
	if h.In, err = ensureStream(ctx, js, t.InputConfig(), t.GenesisSubjects()); err != nil {
		return nil, err
	}
	if h.Out, err = ensureStream(ctx, js, t.DecisionConfig(), nil); err != nil {
		return nil, err
	}
	if h.Leader, err = ensureLeader(ctx, js, t, leaderTTL); err != nil {
		return nil, err
	}
	if h.Snapshots, err = ensureSnapshots(ctx, js, t); err != nil {
		return nil, err
	}
	if h.SnapshotStream, err = js.Stream(ctx, "OBJ_"+t.SnapshotBucket()); err != nil {
		return nil, fmt.Errorf("streams: look up the stream of object store %s: %w", t.SnapshotBucket(), Classify(err))
	}
	return &h, nil
}

// Open looks up an existing topology without creating or updating anything,
// for read-only users such as auditors. A look-up that fails transiently (a
// cluster electing a stream leader) is retried for up to OpenRetry. A missing stream or bucket yields an
// error matching ErrStreamNotFound. Open does not judge the configuration it
// finds; call Handles.Verify for that.
func Open(ctx context.Context, js jetstream.JetStream, t Topology) (*Handles, error) {
	if err := t.validate(); err != nil {
		return nil, err
	}
	var h Handles
	var err error
	if err = transientRetry(ctx, func(ctx context.Context) (err error) { h.In, err = js.Stream(ctx, t.InputStream()); return err }); err != nil {
		return nil, fmt.Errorf("streams: open stream %s: %w", t.InputStream(), Classify(err))
	}
	if err = transientRetry(ctx, func(ctx context.Context) (err error) { h.Out, err = js.Stream(ctx, t.DecisionStream()); return err }); err != nil {
		return nil, fmt.Errorf("streams: open stream %s: %w", t.DecisionStream(), Classify(err))
	}
	if err = transientRetry(ctx, func(ctx context.Context) (err error) { h.Leader, err = js.KeyValue(ctx, t.LeaderBucket()); return err }); err != nil {
		return nil, fmt.Errorf("streams: open kv bucket %s: %w", t.LeaderBucket(), Classify(err))
	}
	if err = transientRetry(ctx, func(ctx context.Context) (err error) {
		h.Snapshots, err = js.ObjectStore(ctx, t.SnapshotBucket())
		return err
	}); err != nil {
		return nil, fmt.Errorf("streams: open object store %s: %w", t.SnapshotBucket(), Classify(err))
	}
	if err = transientRetry(ctx, func(ctx context.Context) (err error) {
		h.SnapshotStream, err = js.Stream(ctx, "OBJ_"+t.SnapshotBucket())
		return err
	}); err != nil {
		return nil, fmt.Errorf("streams: open the stream of object store %s: %w", t.SnapshotBucket(), Classify(err))
	}
	return &h, nil
}

// OpenRetry is how long Open retries a look-up that fails with a transient
// error (ErrTransient: a timeout, no responders, a stream without a leader
// while a cluster elects one) before it gives up.
const OpenRetry = 20 * time.Second

// openAttempt bounds one look-up of Open: a request that a cluster without
// a leader drops is retried, not waited for until ctx's deadline.
const openAttempt = 5 * time.Second

// transientRetry runs op until it succeeds, fails otherwise than
// transiently, OpenRetry has passed, or ctx ends; each attempt gets at most
// openAttempt.
func transientRetry(ctx context.Context, op func(context.Context) error) error {
	deadline := time.Now().Add(OpenRetry)
	wait := 50 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, openAttempt)
		err := op(actx)
		cancel()
		if err == nil || !errors.Is(Classify(err), ErrTransient) || time.Now().Add(wait).After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// Verify checks the lock-down of the input and decision streams as last seen
// (their cached info): the subjects of the topology (an input stream in
// genesis, with GenesisSubjects only, is accepted), not sealed, limits
// retention without limits, no delete, purge, roll-up, per-message TTL,
// schedules, counters, sources or subject transform. It is what an auditor asks before trusting
// the log: whether the history could have been rewritten or trimmed through
// the streams' own settings. It returns a *ConfigMismatchError for the first
// difference found, nil if there is none.
func (h *Handles) Verify(t Topology) error {
	t = t.withDefaults()
	for _, c := range []struct {
		want, got jetstream.StreamConfig
		genesis   []string
	}{
		{t.InputConfig(), h.In.CachedInfo().Config, t.GenesisSubjects()},
		{t.DecisionConfig(), h.Out.CachedInfo().Config, nil},
	} {
		if err := checkLockDown(c.want, c.got, c.genesis); err != nil {
			return err
		}
		if err := checkPartition(c.want, c.got); err != nil {
			return err
		}
	}
	return nil
}

// Check reads the configuration of the input and decision streams from
// the server again (refreshing the handles' cached info) and checks it as
// Ensure checks an existing stream: the lock-down of Verify, durability
// (storage, replicas, duplicate window, acks, persistence, discard new) and
// the partition. It is what a live coordinator runs whenever a stream's
// configuration may have changed (a stream-updated advisory, or on an
// interval), so that a change made behind its back is found at once, not
// at its next start. With genesis, an input stream in genesis
// (GenesisSubjects) is accepted, and inGenesis reports it; without, its
// subjects must be InputConfig's (a stream narrowed back to genesis is a
// Subjects mismatch). A stream that cannot be read is an error wrapping
// Classify's (ErrTransient, ErrStreamNotFound, ...); a configuration less
// safe than t's is a *ConfigMismatchError.
func (h *Handles) Check(ctx context.Context, t Topology, genesis bool) (inGenesis bool, err error) {
	if err := t.validate(); err != nil {
		return false, err
	}
	t = t.withDefaults()
	in, err := h.In.Info(ctx)
	if err != nil {
		return false, fmt.Errorf("streams: stream %s info: %w", t.InputStream(), Classify(err))
	}
	out, err := h.Out.Info(ctx)
	if err != nil {
		return false, fmt.Errorf("streams: stream %s info: %w", t.DecisionStream(), Classify(err))
	}
	var gen []string
	if genesis {
		gen = t.GenesisSubjects()
	}
	if err := checkStream(t.InputConfig(), in.Config, gen); err != nil {
		return false, err
	}
	if err := checkStream(t.DecisionConfig(), out.Config, nil); err != nil {
		return false, err
	}
	return genesis && t.InGenesis(in.Config), nil
}

// ensureStream looks up stream want.Name, creating it when it is missing
// (with genesis as its subjects when not nil, else want's), and checks what
// it finds against want (or genesis, for the subjects).
func ensureStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig, genesis []string) (jetstream.Stream, error) {
	s, err := js.Stream(ctx, want.Name)
	switch {
	case err == nil:
	case errors.Is(err, jetstream.ErrStreamNotFound):
		create := want
		if genesis != nil {
			create.Subjects = genesis
		}
		s, err = js.CreateStream(ctx, create)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			// Another process created it between our look-up and our
			// create, with another configuration: judge what it made.
			s, err = js.Stream(ctx, want.Name)
		}
		if err != nil {
			return nil, fmt.Errorf("streams: create stream %s: %w", want.Name, Classify(err))
		}
	default:
		return nil, fmt.Errorf("streams: look up stream %s: %w", want.Name, Classify(err))
	}
	// Check even what we just created: a server that ignored a setting it
	// does not know must not pass unnoticed.
	if err := checkStream(want, s.CachedInfo().Config, genesis); err != nil {
		return nil, err
	}
	return s, nil
}

// checkStream is every check of a stream Tenure uses: its lock-down (with
// genesis, the input stream's subjects in genesis are accepted too), its
// durability and its partition.
func checkStream(want, got jetstream.StreamConfig, genesis []string) error {
	if err := checkLockDown(want, got, genesis); err != nil {
		return err
	}
	if err := checkDurability(want, got); err != nil {
		return err
	}
	return checkPartition(want, got)
}

// checkLockDown compares the settings that decide whether stored messages
// can be removed, replaced or injected from elsewhere. The subjects must be
// want's, or genesis when it is not nil (an input stream in genesis).
func checkLockDown(want, got jetstream.StreamConfig, genesis []string) error {
	bad := func(field string, w, g any) error {
		return &ConfigMismatchError{Stream: want.Name, Field: field, Want: fmt.Sprint(w), Got: fmt.Sprint(g)}
	}
	limited := func(n int64) bool { return n > 0 }
	// An input stream with quotas (ApplyQuotas) takes the workers' inputs
	// from their intake streams: its subjects and sources are checked by
	// quotaInput, everything else as for any input stream.
	if t, ok := inputTopology(want); ok && (len(got.Sources) > 0 || sameSet(got.Subjects, t.IntakeSubjects())) {
		if err := t.quotaInput(got); err != nil {
			return err
		}
		got.Subjects, got.Sources = want.Subjects, nil
	}
	switch {
	case !sameSet(want.Subjects, got.Subjects) && (genesis == nil || !sameSet(genesis, got.Subjects)):
		if genesis != nil {
			return bad("Subjects", fmt.Sprintf("%v (or %v in genesis)", want.Subjects, genesis), got.Subjects)
		}
		return bad("Subjects", want.Subjects, got.Subjects)
	case got.Sealed:
		// A sealed stream refuses every message and cannot be unsealed:
		// the way on is a new deployment (README.md, "When it will not go
		// live").
		return bad("Sealed", false, got.Sealed)
	case got.Retention != jetstream.LimitsPolicy:
		return bad("Retention", jetstream.LimitsPolicy, got.Retention)
	case limited(got.MaxMsgs):
		return bad("MaxMsgs", "unlimited", got.MaxMsgs)
	case limited(got.MaxBytes):
		return bad("MaxBytes", "unlimited", got.MaxBytes)
	case got.MaxAge > 0:
		return bad("MaxAge", "unlimited", got.MaxAge)
	case limited(got.MaxMsgsPerSubject):
		return bad("MaxMsgsPerSubject", "unlimited", got.MaxMsgsPerSubject)
	case !got.DenyDelete:
		return bad("DenyDelete", true, got.DenyDelete)
	case !got.DenyPurge && !Retained(got):
		return bad("DenyPurge", true, got.DenyPurge)
	case want.Metadata[MetaLogRetention] != "" && !Retained(got):
		// JetStream cannot cancel DenyPurge: a deployment created without
		// log retention keeps its whole log (or migrates to a new prefix).
		return bad("DenyPurge", "false (log retention: streams created with it)", got.DenyPurge)
	case got.AllowRollup:
		return bad("AllowRollup", false, got.AllowRollup)
	case got.AllowMsgTTL:
		return bad("AllowMsgTTL", false, got.AllowMsgTTL)
	case got.AllowMsgSchedules:
		return bad("AllowMsgSchedules", false, got.AllowMsgSchedules)
	case got.AllowMsgCounter:
		return bad("AllowMsgCounter", false, got.AllowMsgCounter)
	case got.Mirror != nil:
		return bad("Mirror", "none", got.Mirror.Name)
	case len(got.Sources) > 0:
		return bad("Sources", "none", len(got.Sources))
	case got.SubjectTransform != nil:
		return bad("SubjectTransform", "none", got.SubjectTransform.Source+" -> "+got.SubjectTransform.Destination)
	}
	return nil
}

// inputTopology returns the topology whose unpartitioned input stream want
// is the configuration of (quotas are for unpartitioned deployments only).
func inputTopology(want jetstream.StreamConfig) (Topology, bool) {
	prefix, ok := strings.CutSuffix(want.Name, "_IN")
	if !ok || !validPrefix(prefix) || !sameSet(want.Subjects, []string{events.InputFilter}) {
		return Topology{}, false
	}
	return Topology{Prefix: prefix}, true
}

// checkDurability compares the settings that decide whether an acknowledged
// message survives a crash and whether a retried append is deduplicated.
// More replicas or a longer duplicate window than asked for are fine.
func checkDurability(want, got jetstream.StreamConfig) error {
	bad := func(field string, w, g any) error {
		return &ConfigMismatchError{Stream: want.Name, Field: field, Want: fmt.Sprint(w), Got: fmt.Sprint(g)}
	}
	switch {
	case got.Storage != want.Storage:
		return bad("Storage", want.Storage, got.Storage)
	case got.Replicas < want.Replicas:
		return bad("Replicas", fmt.Sprintf(">= %d", want.Replicas), got.Replicas)
	case got.Duplicates < want.Duplicates:
		return bad("Duplicates", fmt.Sprintf(">= %v", want.Duplicates), got.Duplicates)
	case got.NoAck:
		return bad("NoAck", false, got.NoAck)
	case got.PersistMode != jetstream.DefaultPersistMode:
		return bad("PersistMode", jetstream.DefaultPersistMode, got.PersistMode)
	case got.Discard != jetstream.DiscardNew:
		return bad("Discard", jetstream.DiscardNew, got.Discard)
	}
	return nil
}

// checkPartition compares the partition metadata: a deployment's partition
// count is fixed when it is created (changing it is a migration to a new
// prefix, see README.md), so a coordinator configured with another count
// must not fold a partition's stream.
func checkPartition(want, got jetstream.StreamConfig) error {
	for _, k := range []string{MetaPartition, MetaPartitions} {
		if want.Metadata[k] != got.Metadata[k] {
			return &ConfigMismatchError{Stream: want.Name, Field: "Metadata[" + k + "]", Want: fmt.Sprintf("%q", want.Metadata[k]), Got: fmt.Sprintf("%q", got.Metadata[k])}
		}
	}
	return nil
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

func ensureLeader(ctx context.Context, js jetstream.JetStream, t Topology, ttl time.Duration) (jetstream.KeyValue, error) {
	name := t.LeaderBucket()
	kv, err := js.KeyValue(ctx, name)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      name,
			Description: "Tenure coordinator leadership",
			History:     1,
			TTL:         ttl,
			Storage:     t.Storage,
			Replicas:    t.Replicas,
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, name) // lost a creation race
		}
		if err != nil {
			return nil, fmt.Errorf("streams: create kv bucket %s: %w", name, Classify(err))
		}
	} else if err != nil {
		return nil, fmt.Errorf("streams: look up kv bucket %s: %w", name, Classify(err))
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("streams: kv bucket %s status: %w", name, Classify(err))
	}
	if cfg := st.Config(); cfg.TTL != ttl || cfg.History != 1 {
		cfg.TTL, cfg.History = ttl, 1
		if kv, err = js.UpdateKeyValue(ctx, cfg); err != nil {
			return nil, fmt.Errorf("streams: update kv bucket %s: %w", name, Classify(err))
		}
	}
	return kv, nil
}

func ensureSnapshots(ctx context.Context, js jetstream.JetStream, t Topology) (jetstream.ObjectStore, error) {
	name := t.SnapshotBucket()
	obs, err := js.ObjectStore(ctx, name)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		obs, err = js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{
			Bucket:      name,
			Description: "Tenure projector snapshots",
			Storage:     t.Storage,
			Replicas:    t.Replicas,
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			obs, err = js.ObjectStore(ctx, name) // lost a creation race
		}
		if err != nil {
			return nil, fmt.Errorf("streams: create object store %s: %w", name, Classify(err))
		}
	} else if err != nil {
		return nil, fmt.Errorf("streams: look up object store %s: %w", name, Classify(err))
	}
	return obs, nil
}
