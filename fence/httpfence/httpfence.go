// Package httpfence carries a lease's fencing token over HTTP (package
// fence): a middleware for Go servers that accepts a request only with a
// token no older than the newest it accepted for the job and an
// idempotency key (the effect id) it has not committed, and a client that
// adds them and turns a refusal into the SDK's typed error.
//
// Server:
//
//	h := httpfence.Handler(mux, httpfence.NewMemory("payments-api"))
//
// Client, in a worker.Run handler (worker.WithEffects(c)):
//
//	c := &httpfence.Client{HTTP: http.DefaultClient, ClaimURL: "http://127.0.0.1:8080/claim"}
//	resp, err := httpfence.From(ctx).Do(req, "charge-1") // errors.Is(err, worker.ErrStaleGeneration) ...
//
// # Headers
//
//   - Tenure-Fence: the token, "<job>/<lease id>/<generation>" (required);
//   - Idempotency-Key: the effect id (required, except on a claim);
//   - Tenure-Deadline: the lease's local deadline, RFC 3339 with
//     nanoseconds (optional): a request the server reads at or after it
//     is refused;
//   - Tenure-Claim: "1" makes the request a claim: the job's fence
//     advances to the token and the server answers 204 without calling
//     the handler.
//
// A refusal is answered 409 Conflict (stale, mismatch, replay) or 412
// Precondition Failed (expired), 400 for a bad token or key, with the
// header Tenure-Fence-Refused (the reason; for a replay also
// Tenure-Fence-Committer: self or other), and never reaches the handler.
// It never names the lease the server holds: a lease id is a capability
// (PROTOCOL.md §4.1), and a stale client told the newer token could send
// its write again under it.
//
// The middleware runs the handler under the job's lock: the admission,
// the handler's effect and its record are atomic with respect to the
// job's other requests. An effect is recorded (and its key spent) only
// when the handler answers 2xx; other answers leave the key free for a
// retry. Memory keeps the fence, the spent keys and the receipts in the
// process: one server instance; several instances need a shared Backend.
package httpfence

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/maknow/tenure/fence"
)

// Header names.
const (
	HeaderFence    = "Tenure-Fence"
	HeaderDeadline = "Tenure-Deadline"
	HeaderKey      = "Idempotency-Key"
	HeaderClaim    = "Tenure-Claim"
	HeaderRefused  = "Tenure-Fence-Refused"
	// HeaderCommitter answers a replay: "self" when the lease that sent
	// the request committed the effect (a retry), "other" otherwise.
	HeaderCommitter = "Tenure-Fence-Committer"
)

// Backend keeps what the middleware remembers: the fence per job, the
// effects committed. Its methods are called under the job's lock.
type Backend interface {
	// Admit applies fence.Admit to t for its job, advancing the fence.
	Admit(ctx context.Context, t fence.Token) error
	// Committed reports the lease that committed effect of job, if any.
	Committed(ctx context.Context, job, effect string) (fence.Token, bool, error)
	// Record records effect as committed by t at now; it returns its
	// receipt.
	Record(ctx context.Context, t fence.Token, effect string, now, deadline time.Time) (fence.Receipt, error)
}

// Memory is a Backend in the process's memory. Safe for concurrent use.
type Memory struct {
	resource string
	mu       sync.Mutex
	held     map[string]fence.Held
	effects  map[[2]string]fence.Token
	receipts []fence.Receipt
}

// NewMemory returns an empty Memory whose receipts name resource.
func NewMemory(resource string) *Memory {
	return &Memory{resource: resource, held: map[string]fence.Held{}, effects: map[[2]string]fence.Token{}}
}

// Admit implements Backend.
func (m *Memory) Admit(_ context.Context, t fence.Token) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := fence.Admit(m.held[t.Job], t); err != nil {
		return err
	}
	m.held[t.Job] = fence.HeldOf(t)
	return nil
}

// Committed implements Backend.
func (m *Memory) Committed(_ context.Context, job, effect string) (fence.Token, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.effects[[2]string{job, effect}]
	return t, ok, nil
}

// Record implements Backend.
func (m *Memory) Record(_ context.Context, t fence.Token, effect string, now, deadline time.Time) (fence.Receipt, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.effects[[2]string{t.Job, effect}] = t
	r := fence.Receipt{V: fence.ReceiptVersion, Resource: m.resource, Job: t.Job, LeaseID: t.LeaseID, Generation: t.Generation,
		Effect: effect, Position: uint64(len(m.receipts) + 1), CommittedAt: now.UnixNano()}
	if !deadline.IsZero() {
		r.Deadline = deadline.UnixNano()
	}
	m.receipts = append(m.receipts, r)
	return r, nil
}

// Receipts returns the receipts recorded so far.
func (m *Memory) Receipts() []fence.Receipt {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]fence.Receipt(nil), m.receipts...)
}

// Options configure Handler.
type Options struct {
	// Job, if set, names the job a request writes for (from its route;
	// "" for none): a token of another job is refused (mismatch).
	Job func(*http.Request) string
	// Now is the server's clock (default time.Now).
	Now func() time.Time
}

// Handler returns next behind the fence kept by b.
func Handler(next http.Handler, b Backend, opts ...func(*Options)) http.Handler {
	o := Options{Now: time.Now}
	for _, f := range opts {
		f(&o)
	}
	var locks [256]sync.Mutex // striped by job: bounded whatever jobs clients name
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, err := fence.ParseToken(r.Header.Get(HeaderFence))
		if err != nil {
			refuse(w, http.StatusBadRequest, "bad_token", "", err.Error())
			return
		}
		claim := r.Header.Get(HeaderClaim) == "1"
		key := r.Header.Get(HeaderKey)
		if !claim {
			if err := fence.CheckEffect(key); err != nil {
				refuse(w, http.StatusBadRequest, "bad_key", "", err.Error())
				return
			}
		}
		var deadline time.Time
		if s := r.Header.Get(HeaderDeadline); s != "" {
			if deadline, err = time.Parse(time.RFC3339Nano, s); err != nil {
				refuse(w, http.StatusBadRequest, "bad_deadline", "", err.Error())
				return
			}
		}
		if o.Job != nil {
			if job := o.Job(r); job != "" {
				if err := fence.CheckJob(t, job); err != nil {
					refuseErr(w, err)
					return
				}
			}
		}
		mu := &locks[stripe(t.Job)]
		mu.Lock()
		defer mu.Unlock()
		ctx := r.Context()
		if err := b.Admit(ctx, t); err != nil {
			refuseErr(w, err)
			return
		}
		if claim {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if by, ok, err := b.Committed(ctx, t.Job, key); err != nil {
			http.Error(w, "fence: "+err.Error(), http.StatusInternalServerError)
			return
		} else if ok {
			refuseErr(w, &fence.RefusedError{Reason: fence.ReasonReplay, Token: t, Held: by, Effect: key})
			return
		}
		if err := fence.CheckDeadline(t, deadline, o.Now()); err != nil {
			refuseErr(w, err)
			return
		}
		rec := &recorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		if rec.status >= 200 && rec.status < 300 {
			_, _ = b.Record(ctx, t, key, o.Now(), deadline)
		}
	})
}

// recorder notes the status the handler wrote.
type recorder struct {
	http.ResponseWriter
	status int
}

// WriteHeader notes code.
func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

// Write notes a 200 if nothing was written.
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap is for http.ResponseController.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// stripe is job's lock: FNV-1a of its bytes, modulo 256.
func stripe(job string) uint8 {
	h := uint32(2166136261)
	for i := 0; i < len(job); i++ {
		h = (h ^ uint32(job[i])) * 16777619
	}
	return uint8(h)
}

func refuse(w http.ResponseWriter, code int, reason, committer, detail string) {
	w.Header().Set(HeaderRefused, reason)
	if committer != "" {
		w.Header().Set(HeaderCommitter, committer)
	}
	http.Error(w, "fence: "+reason+": "+detail, code)
}

func refuseErr(w http.ResponseWriter, err error) {
	var re *fence.RefusedError
	if !errors.As(err, &re) {
		http.Error(w, "fence: "+err.Error(), http.StatusInternalServerError)
		return
	}
	code, committer, detail := http.StatusConflict, "", ""
	switch re.Reason {
	case fence.ReasonStale:
		detail = "a newer lease of job " + re.Token.Job + " was admitted"
	case fence.ReasonMismatch:
		detail = "the token contradicts the lease the server holds for job " + re.Token.Job + ", or names another job"
	case fence.ReasonExpired:
		code, detail = http.StatusPreconditionFailed, "the lease's deadline passed by the server's clock"
	case fence.ReasonReplay:
		committer, detail = "other", "effect "+re.Effect+" was committed already"
		if re.Held == re.Token {
			committer = "self"
		}
	}
	refuse(w, code, string(re.Reason), committer, detail)
}

// Refusal returns the *fence.RefusedError of a refused response of the
// middleware (t the token the request carried, effect its key), nil for
// any other response; a bad token or key is an error matching
// fence.ErrBadToken or fence.ErrBadEffect.
func Refusal(resp *http.Response, t fence.Token, effect string) error {
	reason := resp.Header.Get(HeaderRefused)
	switch reason {
	case "":
		return nil
	case "bad_token", "bad_deadline":
		return fmt.Errorf("%w: the server refused %s (%s)", fence.ErrBadToken, t, reason)
	case "bad_key":
		return fmt.Errorf("%w: the server refused %q", fence.ErrBadEffect, effect)
	}
	re := &fence.RefusedError{Reason: fence.Reason(reason), Token: t, Effect: effect, Detail: "refused by " + resp.Request.URL.Host}
	if reason == string(fence.ReasonReplay) && resp.Header.Get(HeaderCommitter) == "self" {
		re.Held = t // fence.CommittedBy(err, t) holds
	}
	return re
}

// Client sends fenced requests for a lease: worker.Run binds it
// (worker.WithEffects), and a handler reads it with From.
type Client struct {
	HTTP *http.Client // nil: http.DefaultClient
	// ClaimURL, if set, is where Bind claims the job (a POST with
	// Tenure-Claim: 1) before the handler runs.
	ClaimURL string
}

// Bind implements fence.Binder.
func (c *Client) Bind(ctx context.Context, l fence.Lease) (context.Context, error) {
	b := &Bound{c: c, l: l}
	if c.ClaimURL != "" {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.ClaimURL, nil)
		if err != nil {
			return ctx, err
		}
		req.Header.Set(HeaderClaim, "1")
		resp, err := b.send(req, "")
		if err != nil {
			return ctx, err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			return ctx, fmt.Errorf("httpfence: claim %s: %s", l.Token(), resp.Status)
		}
	}
	return context.WithValue(ctx, boundKey{}, b), nil
}

type boundKey struct{}

// Bound is a Client bound to one lease.
type Bound struct {
	c *Client
	l fence.Lease
}

// From returns the Bound that Bind put in ctx; nil if none.
func From(ctx context.Context) *Bound {
	b, _ := ctx.Value(boundKey{}).(*Bound)
	return b
}

// Do sends req as effect effect of b's lease, with the fence's headers;
// a refusal is returned as an error (*fence.RefusedError, which matches
// worker.ErrStaleGeneration and the others) with the response closed.
func (b *Bound) Do(req *http.Request, effect string) (*http.Response, error) {
	req.Header.Set(HeaderKey, effect)
	return b.send(req, effect)
}

func (b *Bound) send(req *http.Request, effect string) (*http.Response, error) {
	t := b.l.Token()
	SetHeaders(req, b.l)
	hc := b.c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	if err := Refusal(resp, t, effect); err != nil {
		resp.Body.Close()
		return nil, err
	}
	return resp, nil
}

// SetHeaders sets the token and deadline headers of lease l on req.
func SetHeaders(req *http.Request, l fence.Lease) {
	req.Header.Set(HeaderFence, l.Token().String())
	if d := l.Expires(); !d.IsZero() {
		req.Header.Set(HeaderDeadline, d.UTC().Format(time.RFC3339Nano))
	} else {
		req.Header.Del(HeaderDeadline)
	}
}

// Lease is the lease b sends for.
func (b *Bound) Lease() fence.Lease { return b.l }
