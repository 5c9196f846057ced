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

// WorkerJetStream returns the JetStream context a worker reaches the
// deployment's streams with: through the worker API prefix
// (Topology.WorkerAPIPrefix) when the worker's account imports it (tenure
// auth init puts every worker in an account of its own), otherwise, when
// nothing answers there (no server permissions, or a worker in the
// deployment's own account), through the plain $JS.API.
func WorkerJetStream(ctx context.Context, nc *nats.Conn, t Topology, opts ...jetstream.JetStreamOpt) (jetstream.JetStream, error) {
	t.Partition = events.Partition{}
	if err := t.validate(); err != nil {
		return nil, err
	}
	pjs, err := jetstream.NewWithAPIPrefix(nc, t.WorkerAPIPrefix(), opts...)
	if err != nil {
		return nil, fmt.Errorf("streams: jetstream: %w", err)
	}
	// The unpartitioned decision stream's info is imported in both
	// layouts (a partitioned deployment's workers look it up first).
	_, err = pjs.Stream(ctx, t.DecisionStream())
	if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) {
		js, err := jetstream.New(nc, opts...)
		if err != nil {
			return nil, fmt.Errorf("streams: jetstream: %w", err)
		}
		return js, nil
	}
	return pjs, nil
}
