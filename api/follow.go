package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/follow"
	"github.com/maknow/tenure/snapshot"
	"github.com/maknow/tenure/streams"
)

// Follow keeps m up to date with the decision streams of the deployment
// (top names the streams; m's partition count says which) until ctx ends:
// one follow.Feed per partition, each waiting for its stream to exist and
// resuming where it stopped after an error. A partition whose decision
// stream no longer holds the decision after the model's position (its
// first segments were archived and removed: package archive) is restored
// from the coordinator's stored snapshot (package snapshot, checked
// against its anchor as a coordinator checks it before restoring it) and
// read on from the snapshot's last decision: the model then holds what the
// coordinator, restored from the same snapshot, holds. Until a snapshot
// checks out the partition is not read (the model is not caught up): it
// is tried again every 2 s, and logged (warn) when the reason changes.
func Follow(ctx context.Context, js jetstream.JetStream, top streams.Topology, m *Model, log *slog.Logger) {
	top.Partition = events.Partition{}
	var wg sync.WaitGroup
	for k, t := range top.Partitions(m.count) {
		r := &restorer{Model: m, js: js, top: t, log: log}
		wg.Go(func() { follow.Feed(ctx, js, t.DecisionStream(), uint32(k), r, log) })
	}
	wg.Wait()
}

// restorer is the model as follow.Feed feeds it one partition, restoring
// it from the partition's stored snapshot (follow.Restorer).
type restorer struct {
	*Model
	js   jetstream.JetStream
	top  streams.Topology
	log  *slog.Logger
	last string // the last failure logged
}

// Restore restores partition part of the model from the stored snapshot.
func (r *restorer) Restore(ctx context.Context, part uint32) error {
	err := r.restore(ctx, part)
	if err != nil {
		if msg := err.Error(); msg != r.last {
			r.last = msg
			r.log.Warn("the read model cannot start after the removed decisions: waiting for a stored snapshot that checks out (tenure log restore puts the archive's back)",
				"stream", r.top.DecisionStream(), "err", err)
		}
		return err
	}
	r.last = ""
	return nil
}

func (r *restorer) restore(ctx context.Context, part uint32) error {
	h, err := streams.Open(ctx, r.js, r.top)
	if err != nil {
		return fmt.Errorf("api: %w", err)
	}
	rd := snapshot.Reader{Objects: snapshot.JetStream(r.top, h), Decisions: h.Out, Partition: r.top.Partition}
	snap, err := rd.Read(ctx)
	if err != nil {
		return fmt.Errorf("api: %w", err)
	}
	p := snap.State
	r.Model.Restore(part, snap.Anchor.DecisionSeq, p)
	r.log.Info("read model restored from the stored snapshot", "stream", r.top.DecisionStream(),
		"input_seq", snap.Anchor.InputSeq, "decision_seq", snap.Anchor.DecisionSeq, "jobs", p.Len())
	return nil
}

// ErrNotAResult is the error of ReadResult for an input that is no result
// about the job asked about.
var ErrNotAResult = errors.New("api: not a result input about the job")

// ErrInputMissing is the error of ReadResult when the input stream holds
// no message at the sequence asked for (its segment was archived and
// removed, or it is beyond the stream's end).
var ErrInputMissing = errors.New("api: no such input in the input stream")

// ReadResult reads input seq of in, the input stream of partition part,
// and returns the worker's account of a result of job it holds (its
// detail, outcome, worker): ErrNotAResult if it is another input,
// ErrInputMissing if the stream holds none at seq.
func ReadResult(ctx context.Context, in streams.MsgGetter, part events.Partition, job string, seq uint64) (WorkerResult, error) {
	w := WorkerResult{Input: seq}
	m, err := in.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return w, fmt.Errorf("%w: input %d", ErrInputMissing, seq)
	}
	if err != nil {
		return w, fmt.Errorf("api: read input %d: %w", seq, streams.Classify(err))
	}
	subject, _ := part.StripInput(m.Subject) // the subject as PROTOCOL.md describes it
	var input events.Input
	if err := events.DecodeInput(subject, m.Data, &input); err != nil || input.Verb != events.VerbResult || input.Job != job {
		return w, fmt.Errorf("%w: input %d is not a result about job %s", ErrNotAResult, seq, job)
	}
	w.Worker, w.Outcome, w.Permanent, w.Detail = input.Actor, input.Outcome.String(), input.Permanent, input.Text
	return w, nil
}

// Results reads, for a Model's jobs, the worker's account of their latest
// results (ReadResult: the decisions do not carry a result's detail) from
// the input streams, and keeps each in the model once read, so that it is
// read once per result. It is safe for concurrent use.
type Results struct {
	js    jetstream.JetStream
	topos []streams.Topology
	m     *Model
	mu    sync.Mutex
	ins   map[uint32]jetstream.Stream
}

// NewResults returns the reader of the results of m's jobs in the streams
// top names (its Partition ignored: m's partition count says which).
func NewResults(js jetstream.JetStream, top streams.Topology, m *Model) *Results {
	top.Partition = events.Partition{}
	return &Results{js: js, topos: top.Partitions(m.count), m: m, ins: make(map[uint32]jetstream.Stream)}
}

// resultFetchers bounds the reads of Fill at a time.
const resultFetchers = 8

// stream returns the input stream of partition part.
func (r *Results) stream(ctx context.Context, part uint32) (jetstream.Stream, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st := r.ins[part]; st != nil {
		return st, nil
	}
	name := r.topos[part].InputStream()
	st, err := r.js.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("api: input stream %s: %w", name, streams.Classify(err))
	}
	r.ins[part] = st
	return st, nil
}

// Fill returns the worker results of the latest results of jobs ids that
// the model has (none for a job without a result), reading from the input
// streams those not read yet, at most 8 at a time, and keeping them in
// the model. A result whose input the stream no longer holds is Removed;
// one that could not be read is left out (and the first error returned).
func (r *Results) Fill(ctx context.Context, ids []string) (map[string]WorkerResult, error) {
	type want struct {
		id   string
		part uint32
		seq  uint64
	}
	out := make(map[string]WorkerResult)
	var todo []want
	r.m.mu.RLock()
	for _, id := range ids {
		e := r.m.jobs[id]
		switch {
		case e == nil || e.result == 0:
		case e.worker != nil:
			out[id] = *e.worker
		default:
			todo = append(todo, want{id, e.part, e.result})
		}
	}
	r.m.mu.RUnlock()
	if len(todo) == 0 {
		return out, nil
	}
	got := make([]WorkerResult, len(todo))
	errs := make([]error, len(todo))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(resultFetchers, len(todo)) {
		wg.Go(func() {
			for i := range next {
				w := todo[i]
				st, err := r.stream(ctx, w.part)
				if err == nil {
					got[i], err = ReadResult(ctx, st, r.topos[w.part].Partition, w.id, w.seq)
				}
				if errors.Is(err, ErrInputMissing) {
					got[i], err = WorkerResult{Input: w.seq, Removed: true}, nil
				}
				errs[i] = err
			}
		})
	}
	for i := range todo {
		next <- i
	}
	close(next)
	wg.Wait()
	r.m.mu.Lock()
	for i, w := range todo {
		if errs[i] != nil {
			continue
		}
		out[w.id] = got[i]
		if e := r.m.jobs[w.id]; e != nil && e.result == w.seq {
			wr := got[i]
			e.worker = &wr
		}
	}
	r.m.mu.Unlock()
	return out, errors.Join(errs...)
}

// Read reads input seq of job id's partition's input stream as the
// worker's account of a result of the job (ReadResult), or, with seq 0,
// the job's latest result's (Fill; ok false when the model has no result
// of the job).
func (r *Results) Read(ctx context.Context, id string, seq uint64) (w WorkerResult, ok bool, err error) {
	if seq == 0 {
		got, err := r.Fill(ctx, []string{id})
		w, ok = got[id]
		if !ok && err == nil {
			return w, false, nil
		}
		return w, ok, err
	}
	part := events.PartitionOf(id, r.m.count)
	st, err := r.stream(ctx, part)
	if err != nil {
		return w, false, err
	}
	w, err = ReadResult(ctx, st, r.topos[part].Partition, id, seq)
	return w, err == nil, err
}
