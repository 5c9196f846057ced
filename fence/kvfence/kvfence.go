// Package kvfence makes a stale lease holder's write fail at a NATS KV
// bucket (package fence): every fenced write is one atomic batch
// (JetStream's atomic publish) of the job's fence key, the effect's own
// writes and the effect's record, each compare-and-set by its last
// revision, so that the server stores all of them or none.
//
//	fx, err := kvfence.New(ctx, js, "ledger") // creates the bucket if needed, allows atomic batches
//	_, err = fx.Do(ctx, lease, "transfer", func(w *kvfence.Writes) error {
//		w.Put("balance.a", []byte("90"))
//		w.Put("balance.b", []byte("110"))
//		return nil
//	})
//
// # Keys
//
//   - fence.<job>: the newest lease admitted for the job (its token);
//   - effect.<job>.<effect id, base64url>: the effect's record (its
//     token and deadline, as JSON), created once: its revision is the
//     receipt's position and its stored time the commit time, on the
//     NATS server's clock (the log's, when the bucket is on Tenure's
//     server);
//   - the keys the effect writes: any others.
//
// Do reads the fence key and applies fence.Admit (refused: nothing is
// sent), refuses an effect whose record exists (a replay) and a lease past
// its deadline by this process's clock, then publishes the batch: the
// fence key expecting the revision it read, the writes, and the effect's
// record expecting none. A newer lease's claim or write in between fails
// the whole batch, and Do reads again. The server checks the fence and
// the effect's uniqueness; the deadline check is the writer's own (a
// pause between it and the publish is not refused, and the audit of the
// receipts sees it).
package kvfence

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/fence"
)

// Store is a KV bucket whose writes are fenced. Safe for concurrent use.
type Store struct {
	nc       *nats.Conn
	kv       jetstream.KeyValue
	bucket   string
	prefix   string // the bucket's subject prefix, "$KV.<bucket>."
	resource string
	now      func() time.Time
}

// New opens the bucket (creating it, with history 1, if it does not
// exist) and allows atomic batches on its stream.
func New(ctx context.Context, js jetstream.JetStream, bucket string) (*Store, error) {
	kv, err := js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, Storage: jetstream.FileStorage})
	}
	if err != nil {
		return nil, fmt.Errorf("kvfence: bucket %s: %w", bucket, err)
	}
	st, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return nil, fmt.Errorf("kvfence: bucket %s: %w", bucket, err)
	}
	if cfg := st.CachedInfo().Config; !cfg.AllowAtomicPublish {
		cfg.AllowAtomicPublish = true
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			return nil, fmt.Errorf("kvfence: bucket %s: allow atomic batches: %w", bucket, err)
		}
	}
	return &Store{nc: js.Conn(), kv: kv, bucket: bucket, prefix: "$KV." + bucket + ".", resource: "nats kv " + bucket, now: time.Now}, nil
}

// KeyValue is the bucket.
func (s *Store) KeyValue() jetstream.KeyValue { return s.kv }

// Resource is the name the receipts give the bucket.
func (s *Store) Resource() string { return s.resource }

// Writes are the keys an effect writes, in the batch of its record.
type Writes struct {
	keys []string
	vals [][]byte
}

// Put writes value at key (a valid KV key that is no fence or effect key).
func (w *Writes) Put(key string, value []byte) {
	w.keys = append(w.keys, key)
	w.vals = append(w.vals, value)
}

// Commit is where and when the server stored an effect.
type Commit struct {
	Position uint64 // the effect record's revision
}

type record struct {
	Job        string `json:"job"`
	LeaseID    string `json:"lease_id"`
	Generation uint64 `json:"generation"`
	Effect     string `json:"effect"`
	Deadline   int64  `json:"deadline,omitempty"`
}

func fenceKey(job string) string { return "fence." + job }

func effectKey(job, effect string) string {
	return "effect." + job + "." + base64.RawURLEncoding.EncodeToString([]byte(effect))
}

// maxTries bounds the rounds of Do and Claim lost to concurrent writers.
const maxTries = 20

// Claim advances the job's fence to token t: from then on an older
// lease's writes are refused. A refusal is a *fence.RefusedError.
func (s *Store) Claim(ctx context.Context, t fence.Token) error {
	if err := t.Check(); err != nil {
		return err
	}
	for range maxTries {
		rev, err := s.admit(ctx, t)
		if err != nil {
			return err
		}
		err = s.batch(ctx, []msg{{key: fenceKey(t.Job), val: []byte(t.String()), expect: rev, exact: true}})
		if !errors.Is(err, errMoved) {
			return err
		}
	}
	return fmt.Errorf("kvfence: claim %s: lost %d rounds to concurrent writers", t, maxTries)
}

// Do commits the writes fn makes as the effect effect of lease l, fenced:
// see the package documentation. Its results are pgfence.Store.Do's.
func (s *Store) Do(ctx context.Context, l fence.Lease, effect string, fn func(w *Writes) error) (Commit, error) {
	t := l.Token()
	if err := t.Check(); err != nil {
		return Commit{}, err
	}
	if err := fence.CheckEffect(effect); err != nil {
		return Commit{}, err
	}
	var w Writes
	if err := fn(&w); err != nil {
		return Commit{}, err
	}
	for _, k := range w.keys {
		if strings.HasPrefix(k, "fence.") || strings.HasPrefix(k, "effect.") || !jetstreamKey(k) {
			return Commit{}, fmt.Errorf("kvfence: %s effect %s: key %q: a fence or effect key, or not a valid key", t, effect, k)
		}
	}
	deadline := l.Expires()
	rec := record{Job: t.Job, LeaseID: t.LeaseID, Generation: t.Generation, Effect: effect}
	if !deadline.IsZero() {
		rec.Deadline = deadline.UnixNano()
	}
	body, _ := json.Marshal(rec)
	for range maxTries {
		rev, err := s.admit(ctx, t)
		if err != nil {
			return Commit{}, err
		}
		if e, err := s.kv.Get(ctx, effectKey(t.Job, effect)); err == nil {
			var r record
			_ = json.Unmarshal(e.Value(), &r)
			return Commit{}, &fence.RefusedError{Reason: fence.ReasonReplay, Token: t, Effect: effect,
				Held: fence.Token{Job: t.Job, LeaseID: r.LeaseID, Generation: r.Generation}}
		} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return Commit{}, fmt.Errorf("kvfence: %s effect %s: %w", t, effect, err)
		}
		if err := fence.CheckDeadline(t, deadline, s.now()); err != nil {
			return Commit{}, err
		}
		ms := []msg{{key: fenceKey(t.Job), val: []byte(t.String()), expect: rev, exact: true}}
		for i, k := range w.keys {
			ms = append(ms, msg{key: k, val: w.vals[i]})
		}
		ms = append(ms, msg{key: effectKey(t.Job, effect), val: body, expect: 0, exact: true})
		err = s.batch(ctx, ms)
		if errors.Is(err, errMoved) {
			continue // a concurrent claim or write: read again
		}
		if err != nil {
			return Commit{}, fmt.Errorf("kvfence: %s effect %s: %w", t, effect, err)
		}
		e, err := s.kv.Get(ctx, effectKey(t.Job, effect))
		if err != nil {
			return Commit{}, fmt.Errorf("kvfence: %s effect %s: committed, its record unread: %w", t, effect, err)
		}
		return Commit{Position: e.Revision()}, nil
	}
	return Commit{}, fmt.Errorf("kvfence: %s effect %s: lost %d rounds to concurrent writers", t, effect, maxTries)
}

// admit reads the job's fence key and applies fence.Admit; it returns the
// key's revision (0: none).
func (s *Store) admit(ctx context.Context, t fence.Token) (uint64, error) {
	e, err := s.kv.Get(ctx, fenceKey(t.Job))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("kvfence: %s: fence: %w", t, err)
	}
	held, err := fence.ParseToken(string(e.Value()))
	if err != nil {
		return 0, fmt.Errorf("kvfence: %s: fence key of %s holds %q: %w", t, t.Job, e.Value(), err)
	}
	if err := fence.Admit(fence.HeldOf(held), t); err != nil {
		return 0, err
	}
	return e.Revision(), nil
}

type msg struct {
	key    string
	val    []byte
	expect uint64
	exact  bool // send Nats-Expected-Last-Subject-Sequence: expect
}

// errMoved is a batch refused because a key it expected moved.
var errMoved = errors.New("kvfence: a key moved")

// batch publishes ms as one atomic batch and waits for its PubAck.
func (s *Store) batch(ctx context.Context, ms []msg) error {
	id := uuid.NewString()
	for i, m := range ms {
		nm := nats.NewMsg(s.prefix + m.key)
		nm.Data = m.val
		nm.Header.Set("Nats-Batch-Id", id)
		nm.Header.Set("Nats-Batch-Sequence", strconv.Itoa(i+1))
		if m.exact {
			nm.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(m.expect, 10))
		}
		if i < len(ms)-1 {
			if err := s.nc.PublishMsg(nm); err != nil {
				return err
			}
			continue
		}
		nm.Header.Set("Nats-Batch-Commit", "1")
		reply, err := s.nc.RequestMsgWithContext(ctx, nm)
		if err != nil {
			return err
		}
		var ack struct {
			Error *struct {
				Code    int    `json:"code"`
				ErrCode int    `json:"err_code"`
				Desc    string `json:"description"`
			} `json:"error"`
			Seq uint64 `json:"seq"`
		}
		if err := json.Unmarshal(reply.Data, &ack); err != nil {
			return fmt.Errorf("kvfence: batch ack %q: %w", reply.Data, err)
		}
		if ack.Error != nil {
			if ack.Error.ErrCode == 10071 { // wrong last sequence
				return errMoved
			}
			return fmt.Errorf("kvfence: batch refused: %s (%d)", ack.Error.Desc, ack.Error.ErrCode)
		}
	}
	return nil
}

// jetstreamKey reports whether k is a valid KV key.
func jetstreamKey(k string) bool {
	if k == "" || k[0] == '.' || k[len(k)-1] == '.' || strings.Contains(k, "..") {
		return false
	}
	for _, c := range k {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '/' || c == '=' || c == '.') {
			return false
		}
	}
	return true
}

// Receipts returns the receipt of every effect recorded in the bucket,
// in revision order.
func (s *Store) Receipts(ctx context.Context) ([]fence.Receipt, error) {
	lister, err := s.kv.ListKeysFiltered(ctx, "effect.>")
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil, nil
		}
		return nil, fmt.Errorf("kvfence: receipts: %w", err)
	}
	var out []fence.Receipt
	for k := range lister.Keys() {
		e, err := s.kv.Get(ctx, k)
		if err != nil {
			return nil, fmt.Errorf("kvfence: receipts: %s: %w", k, err)
		}
		var r record
		if err := json.Unmarshal(e.Value(), &r); err != nil {
			return nil, fmt.Errorf("kvfence: receipts: %s: %w", k, err)
		}
		out = append(out, fence.Receipt{V: fence.ReceiptVersion, Resource: s.resource, Job: r.Job, LeaseID: r.LeaseID,
			Generation: r.Generation, Effect: r.Effect, Position: e.Revision(), CommittedAt: e.Created().UnixNano(), Deadline: r.Deadline})
	}
	sortByPosition(out)
	return out, nil
}

func sortByPosition(rs []fence.Receipt) {
	for i := 1; i < len(rs); i++ {
		for j := i; j > 0 && rs[j].Position < rs[j-1].Position; j-- {
			rs[j], rs[j-1] = rs[j-1], rs[j]
		}
	}
}

// WriteReceipts writes the receipts to w as JSON lines.
func (s *Store) WriteReceipts(ctx context.Context, w io.Writer) error {
	rs, err := s.Receipts(ctx)
	if err != nil {
		return err
	}
	return fence.WriteReceipts(w, rs)
}

// Bind implements fence.Binder for worker.WithEffects: it claims the job
// for l and returns ctx carrying the Bound that From reads.
func (s *Store) Bind(ctx context.Context, l fence.Lease) (context.Context, error) {
	if err := s.Claim(ctx, l.Token()); err != nil {
		return ctx, err
	}
	return context.WithValue(ctx, boundKey{}, &Bound{s: s, l: l}), nil
}

type boundKey struct{}

// Bound is a Store bound to one lease.
type Bound struct {
	s *Store
	l fence.Lease
}

// From returns the Bound that Bind put in ctx; nil if none.
func From(ctx context.Context) *Bound {
	b, _ := ctx.Value(boundKey{}).(*Bound)
	return b
}

// Do is Store.Do for b's lease.
func (b *Bound) Do(ctx context.Context, effect string, fn func(w *Writes) error) (Commit, error) {
	return b.s.Do(ctx, b.l, effect, fn)
}
