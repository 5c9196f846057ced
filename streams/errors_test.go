package streams_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/streams"
)

// TestExpectedLastSequenceConflictIsLostAuthority is the single-writer fence
// of DESIGN.md §3 against a real server: the second append that expects the
// same last sequence is refused, and Classify calls that lost authority.
func TestExpectedLastSequenceConflictIsLostAuthority(t *testing.T) {
	js := startJS(t)
	ctx := testCtx(t)
	h, err := streams.Ensure(ctx, js, streams.Topology{}, leaderTTL)
	if err != nil {
		t.Fatal(err)
	}
	const subj = "tenure.out.w1.j1.granted"
	ack, err := js.Publish(ctx, subj, []byte("first"), jetstream.WithExpectLastSequence(0))
	if err != nil {
		t.Fatalf("fenced append on empty stream: %v", err)
	}
	if ack.Sequence != 1 || ack.Stream != h.Out.CachedInfo().Config.Name {
		t.Fatalf("ack = %+v", ack)
	}

	// A second writer that still believes the stream is empty.
	_, err = js.Publish(ctx, subj, []byte("second"), jetstream.WithExpectLastSequence(0))
	if err == nil {
		t.Fatal("conflicting append succeeded")
	}
	cerr := streams.Classify(err)
	if !errors.Is(cerr, streams.ErrLostAuthority) {
		t.Fatalf("Classify(%v) does not match ErrLostAuthority", err)
	}
	if !errors.Is(cerr, err) {
		t.Errorf("classified error lost the original")
	}
	var api *jetstream.APIError
	if !errors.As(cerr, &api) || api.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
		t.Errorf("errors.As APIError = %v, want code %d", api, jetstream.JSErrCodeStreamWrongLastSequence)
	}
	if errors.Is(cerr, streams.ErrTransient) {
		t.Errorf("lost authority must not be transient")
	}
	// Wrapping with an operation name keeps both inspectable.
	wrapped := fmt.Errorf("append decision: %w", cerr)
	if !errors.Is(wrapped, streams.ErrLostAuthority) || !errors.As(wrapped, &api) {
		t.Errorf("wrapped classified error not inspectable: %v", wrapped)
	}

	// Asynchronous, pipelined appends report the same conflict.
	fut, err := js.PublishAsync(subj, []byte("third"), jetstream.WithExpectLastSequence(0))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-fut.Ok():
		t.Fatal("conflicting async append succeeded")
	case err := <-fut.Err():
		if !errors.Is(streams.Classify(err), streams.ErrLostAuthority) {
			t.Errorf("async conflict %v not classified as lost authority", err)
		}
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}

	// The correct expectation still appends.
	if _, err := js.Publish(ctx, subj, []byte("next"), jetstream.WithExpectLastSequence(1)); err != nil {
		t.Errorf("append with the right last sequence: %v", err)
	}
}

func TestClassifyRealErrors(t *testing.T) {
	js := startJS(t)
	ctx := testCtx(t)

	_, err := js.Stream(ctx, "NOPE")
	if !errors.Is(streams.Classify(err), streams.ErrStreamNotFound) {
		t.Errorf("missing stream %v not classified as ErrStreamNotFound", err)
	}
	_, err = js.KeyValue(ctx, "NOPE")
	if !errors.Is(streams.Classify(err), streams.ErrStreamNotFound) {
		t.Errorf("missing bucket %v not classified as ErrStreamNotFound", err)
	}
	_, err = js.Publish(ctx, "no.stream.here", nil, jetstream.WithRetryAttempts(0))
	c := streams.Classify(err)
	if !errors.Is(c, streams.ErrNoResponders) || !errors.Is(c, streams.ErrTransient) {
		t.Errorf("publish without stream %v not classified as no responders", err)
	}
}

func TestClassify(t *testing.T) {
	api := func(code jetstream.ErrorCode) error {
		return fmt.Errorf("nats: %w", &jetstream.APIError{Code: 400, ErrorCode: code, Description: "x"})
	}
	plain := io.ErrUnexpectedEOF
	for _, tc := range []struct {
		name string
		err  error
		is   []error
		not  []error
	}{
		{"wrong last sequence", api(10071), []error{streams.ErrLostAuthority}, []error{streams.ErrTransient}},
		{"wrong last sequence, replicated", api(10164), []error{streams.ErrLostAuthority}, []error{streams.ErrTransient}},
		{"legacy api error", &nats.APIError{ErrorCode: 10164}, []error{streams.ErrLostAuthority}, nil},
		{"stream not found", jetstream.ErrStreamNotFound, []error{streams.ErrStreamNotFound, jetstream.ErrStreamNotFound}, nil},
		{"bucket not found", fmt.Errorf("open: %w", jetstream.ErrBucketNotFound), []error{streams.ErrStreamNotFound}, nil},
		{"cluster not available", api(10008), []error{streams.ErrNoLeader, streams.ErrTransient}, []error{streams.ErrLostAuthority}},
		{"cluster not leader", api(10009), []error{streams.ErrNoLeader, streams.ErrTransient}, nil},
		{"no responders", nats.ErrNoResponders, []error{streams.ErrNoResponders, streams.ErrTransient}, nil},
		{"no stream response", jetstream.ErrNoStreamResponse, []error{streams.ErrNoResponders, streams.ErrTransient}, nil},
		{"timeout", nats.ErrTimeout, []error{streams.ErrTransient}, []error{streams.ErrNoResponders}},
		{"deadline", context.DeadlineExceeded, []error{streams.ErrTransient}, nil},
		{"other api error", api(10058), nil, []error{streams.ErrLostAuthority, streams.ErrTransient, streams.ErrStreamNotFound}},
		{"unrelated", plain, nil, []error{streams.ErrLostAuthority, streams.ErrTransient}},
	} {
		c := streams.Classify(tc.err)
		if !errors.Is(c, tc.err) {
			t.Errorf("%s: original not reachable", tc.name)
		}
		for _, want := range tc.is {
			if !errors.Is(c, want) {
				t.Errorf("%s: errors.Is(%v, %v) = false", tc.name, c, want)
			}
		}
		for _, not := range tc.not {
			if errors.Is(c, not) {
				t.Errorf("%s: errors.Is(%v, %v) = true", tc.name, c, not)
			}
		}
		if len(tc.is) == 0 && c != tc.err {
			t.Errorf("%s: unrecognised error changed to %v", tc.name, c)
		}
		if again := streams.Classify(c); again != c {
			t.Errorf("%s: Classify is not idempotent", tc.name)
		}
	}
	if streams.Classify(nil) != nil {
		t.Error("Classify(nil) != nil")
	}
}
