package streams

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/events"
)

// Discover finds the deployment with t's prefix on a server and returns its
// partition count: 0 when its decision stream is the unpartitioned
// <Prefix>_OUT, the count recorded in the metadata of <Prefix>_P0_OUT
// otherwise. It creates nothing; no deployment at all is an error matching
// ErrStreamNotFound. Clients that publish inputs (the worker SDK, ops) call
// it once so that they can compute each job's partition themselves. It
// reads the decision streams' info only, which those clients' NATS users may
// read (they follow their verdicts there), unlike the input streams'.
func Discover(ctx context.Context, js jetstream.JetStream, t Topology) (uint32, error) {
	t.Partition = events.Partition{}
	if err := t.validate(); err != nil {
		return 0, err
	}
	_, err := js.Stream(ctx, t.DecisionStream())
	if err == nil {
		return 0, nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, fmt.Errorf("streams: discover %s: %w", t.DecisionStream(), Classify(err))
	}
	p0 := t
	p0.Partition = events.Partition{Index: 0, Count: 1}
	s, err := js.Stream(ctx, p0.DecisionStream())
	if err != nil {
		return 0, fmt.Errorf("streams: discover: neither %s nor %s: %w", t.DecisionStream(), p0.DecisionStream(), Classify(err))
	}
	md := s.CachedInfo().Config.Metadata
	n, err := strconv.ParseUint(md[MetaPartitions], 10, 32)
	if err != nil || n == 0 || n > events.MaxPartitions || md[MetaPartition] != "0" {
		return 0, fmt.Errorf("streams: discover: stream %s does not record a valid partition count (metadata %s=%q, %s=%q)",
			p0.DecisionStream(), MetaPartition, md[MetaPartition], MetaPartitions, md[MetaPartitions])
	}
	return uint32(n), nil
}

// EnsureAll is Ensure for every partition of a deployment of count
// partitions (count 0: the unpartitioned topology t).
func EnsureAll(ctx context.Context, js jetstream.JetStream, t Topology, count uint32, leaderTTL time.Duration) ([]*Handles, error) {
	var hs []*Handles
	for _, pt := range t.Partitions(count) {
		h, err := Ensure(ctx, js, pt, leaderTTL)
		if err != nil {
			return nil, err
		}
		hs = append(hs, h)
	}
	return hs, nil
}

// DiscoverWorker is a worker's Discover: it finds the JetStream API the
// worker reaches the deployment's streams with and the deployment's
// partition count (0: unpartitioned) without the decision streams' info,
// which a worker may not read (the subjects filter of a stream info lists
// every decision subject: PROTOCOL.md §4.1). It looks up the consumer
// named consumer, the first of the worker's own names
// (events.WorkerConsumerName(id, 0)), on the decision streams: a look-up
// is answered with the consumer's info or "consumer not found" when the
// stream exists, "stream not found" when it does not, and has no
// responders where the worker's account imports nothing.
//
// Through the worker API prefix (Topology.WorkerAPIPrefix), which a worker
// in an account of its own (tenure auth init) reaches: an answer on
// <Prefix>_OUT is an unpartitioned deployment; no responders there and an
// answer on <Prefix>_P0_OUT a partitioned one, whose count is the number
// of partitions k whose look-up on <Prefix>_P<k>_OUT is answered (tenure
// auth init --partitions N lets the worker send, unanswered, the look-ups
// on <Prefix>_OUT and <Prefix>_P<N>_OUT, which end the count). No
// responders on both: the worker is not in an account of its own, and
// the plain $JS.API is used, where the count is that of the partition
// streams that exist (so connect workers once every partition's
// coordinator has created its streams, as tenure serve --partitions has
// when it says it is live). No deployment at all is an error matching
// ErrStreamNotFound, as a partition stream missing below the count is.
func DiscoverWorker(ctx context.Context, nc *nats.Conn, t Topology, consumer string, opts ...jetstream.JetStreamOpt) (jetstream.JetStream, uint32, error) {
	t.Partition = events.Partition{}
	if err := t.validate(); err != nil {
		return nil, 0, err
	}
	pjs, err := jetstream.NewWithAPIPrefix(nc, t.WorkerAPIPrefix(), opts...)
	if err != nil {
		return nil, 0, fmt.Errorf("streams: jetstream: %w", err)
	}
	p0 := t
	p0.Partition = events.Partition{Index: 0, Count: 1}
	found, err := lookUp(ctx, pjs, t.DecisionStream(), consumer)
	switch {
	case err == nil && found:
		return pjs, 0, nil
	case err == nil:
		return nil, 0, fmt.Errorf("streams: discover: %s: %w", t.DecisionStream(), ErrStreamNotFound)
	case !errors.Is(err, nats.ErrNoResponders):
		return nil, 0, fmt.Errorf("streams: discover %s: %w", t.DecisionStream(), err)
	}
	js := pjs
	found, err = lookUp(ctx, pjs, p0.DecisionStream(), consumer)
	if errors.Is(err, nats.ErrNoResponders) {
		// Nothing imported under the worker API prefix: the plain API.
		if js, err = jetstream.New(nc, opts...); err != nil {
			return nil, 0, fmt.Errorf("streams: jetstream: %w", err)
		}
		if found, err = lookUp(ctx, js, t.DecisionStream(), consumer); err != nil {
			return nil, 0, fmt.Errorf("streams: discover %s: %w", t.DecisionStream(), err)
		}
		if found {
			return js, 0, nil
		}
		found, err = lookUp(ctx, js, p0.DecisionStream(), consumer)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("streams: discover %s: %w", p0.DecisionStream(), err)
	}
	if !found {
		return nil, 0, fmt.Errorf("streams: discover: neither %s nor %s: %w", t.DecisionStream(), p0.DecisionStream(), ErrStreamNotFound)
	}
	n := uint32(1)
	for ; n < events.MaxPartitions; n++ {
		pk := t
		pk.Partition = events.Partition{Index: n, Count: n + 1}
		found, err := lookUp(ctx, js, pk.DecisionStream(), consumer)
		if errors.Is(err, nats.ErrNoResponders) && js == pjs {
			break // one past the last the worker's account imports
		}
		if err != nil {
			return nil, 0, fmt.Errorf("streams: discover %s: %w", pk.DecisionStream(), err)
		}
		if !found && js == pjs {
			// Imported, so the deployment has it: not created yet.
			return nil, 0, fmt.Errorf("streams: discover: %s (partition %d of a deployment of at least %d): %w", pk.DecisionStream(), n, n+1, ErrStreamNotFound)
		}
		if !found {
			break
		}
	}
	return js, n, nil
}

// lookUp looks up consumer on stream: found reports whether the stream
// exists (the answer is the consumer's info or "consumer not found"); an
// error is no answer at all (nats.ErrNoResponders where nothing is
// imported), or another refusal.
func lookUp(ctx context.Context, js jetstream.JetStream, stream, consumer string) (found bool, err error) {
	_, err = js.Consumer(ctx, stream, consumer)
	switch {
	case err == nil, errors.Is(err, jetstream.ErrConsumerNotFound):
		return true, nil
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse):
		return false, nats.ErrNoResponders
	}
	if code, ok := apiCode(err); ok && code == codeStreamNotFound {
		return false, nil
	}
	return false, Classify(err)
}
