package streams

import (
	"context"
	"errors"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Sentinels that Classify attaches to JetStream errors. Match them with
// errors.Is; the original error stays reachable through errors.Is and
// errors.As as well.
var (
	// ErrLostAuthority means an append fenced by Nats-Expected-Last-Sequence
	// was refused because the stream has moved on: another writer has
	// authority. The caller must stop writing (DESIGN.md §3).
	ErrLostAuthority = errors.New("streams: lost authority (wrong last sequence)")

	// ErrStreamNotFound means a stream or bucket of the topology does not
	// exist (KV buckets and Object Stores are streams underneath).
	ErrStreamNotFound = errors.New("streams: stream not found")

	// ErrNoLeader means the JetStream cluster, or the stream's group, has no
	// leader at the moment. It also matches ErrTransient.
	ErrNoLeader = errors.New("streams: no jetstream leader")

	// ErrNoResponders means nobody answered the request: no stream listens on
	// the subject, or its leader is being elected. It also matches
	// ErrTransient.
	ErrNoResponders = errors.New("streams: no responders")

	// ErrTransient means a retry may succeed. After a timeout the outcome of a
	// publish is unknown: retry it with the same Nats-Msg-Id so that the
	// stream's duplicate window drops it if the first attempt was stored.
	ErrTransient = errors.New("streams: transient jetstream error")
)

// JetStream API error codes that Classify maps. Those that nats.go's
// jetstream package names are taken from there; the others carry the
// constant name of nats-server v2.15 server/errors.json.
const (
	// codeWrongLastSeq is JSStreamWrongLastSequenceErrF ("wrong last
	// sequence: {seq}"), jetstream.JSErrCodeStreamWrongLastSequence.
	codeWrongLastSeq = uint16(jetstream.JSErrCodeStreamWrongLastSequence) // 10071
	// codeWrongLastSeqConstant is JSStreamWrongLastSequenceConstantErr
	// ("wrong last sequence", without the sequence), which nats.go names
	// jetstream.JSErrCodeStreamWrongLastSequenceConstant and documents as
	// the form replicated (R>1) streams return for the same conflict. In
	// nats-server v2.15.2 it comes from the pre-proposal header check that
	// replicated streams and batches go through
	// (checkMsgHeadersPreClusteredProposal): a plain mismatch there still
	// answers 10071, and 10164 when the expectation meets in-flight writes
	// (an expected sequence on a later message of a batch, or a per-subject
	// expectation on a subject with a write in flight). Either way the
	// append was refused because of the stream's position, so it is mapped
	// to ErrLostAuthority too: stopping is the safe answer.
	codeWrongLastSeqConstant = uint16(jetstream.JSErrCodeStreamWrongLastSequenceConstant) // 10164
	codeStreamNotFound       = uint16(jetstream.JSErrCodeStreamNotFound)                  // 10059
	codeClusterNotAvail      = uint16(10008)                                              // JSClusterNotAvailErr
	codeClusterNotLeader     = uint16(10009)                                              // JSClusterNotLeaderErr
	codeExpectedPerSubjNotRd = uint16(10163)                                              // JSStreamExpectedLastSeqPerSubjectNotReady
	codeAtomicTooManyInfl    = uint16(10210)                                              // JSAtomicPublishTooManyInflight
	codeBatchTooManyInfl     = uint16(10211)                                              // JSBatchPublishTooManyInflight
	codeMaxExceeded          = uint16(10077)                                              // JSStreamStoreFailedF: a stream's limits refused the message
)

// Classify returns err wrapped so that errors.Is also matches the sentinels
// of this package that apply to it. It decides by JetStream API error code
// (jetstream.APIError or the legacy nats.APIError) and by the identity of
// nats.go's sentinel errors, never by message text. The original error stays
// reachable with errors.Is and errors.As. Errors it does not recognise, nil,
// and errors already classified are returned unchanged.
func Classify(err error) error {
	if err == nil {
		return nil
	}
	var done *classifiedError
	if errors.As(err, &done) {
		return err
	}
	kinds := kindsOf(err)
	if len(kinds) == 0 {
		return err
	}
	return &classifiedError{kinds: kinds, err: err}
}

func kindsOf(err error) []error {
	if code, ok := apiCode(err); ok {
		switch code {
		case codeWrongLastSeq, codeWrongLastSeqConstant:
			return []error{ErrLostAuthority}
		case codeStreamNotFound:
			return []error{ErrStreamNotFound}
		case codeClusterNotAvail, codeClusterNotLeader:
			return []error{ErrNoLeader, ErrTransient}
		case codeExpectedPerSubjNotRd, codeAtomicTooManyInfl, codeBatchTooManyInfl:
			return []error{ErrTransient}
		}
	}
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound), errors.Is(err, nats.ErrBucketNotFound),
		errors.Is(err, nats.ErrStreamNotFound):
		return []error{ErrStreamNotFound}
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse):
		return []error{ErrNoResponders, ErrTransient}
	case errors.Is(err, nats.ErrTimeout), errors.Is(err, jetstream.ErrAsyncPublishTimeout),
		errors.Is(err, context.DeadlineExceeded):
		return []error{ErrTransient}
	}
	return nil
}

// apiCode extracts the JetStream API error code carried by err, if any.
func apiCode(err error) (uint16, bool) {
	var je *jetstream.APIError
	if errors.As(err, &je) && je.ErrorCode != 0 {
		return uint16(je.ErrorCode), true
	}
	var ne *nats.APIError
	if errors.As(err, &ne) && ne.ErrorCode != 0 {
		return uint16(ne.ErrorCode), true
	}
	return 0, false
}

// classifiedError is an error together with the sentinels Classify found for
// it.
type classifiedError struct {
	kinds []error
	err   error
}

func (e *classifiedError) Error() string { return e.kinds[0].Error() + ": " + e.err.Error() }

// Unwrap exposes the original error first, then the sentinels.
func (e *classifiedError) Unwrap() []error {
	return append([]error{e.err}, e.kinds...)
}

// QuotaRefusal reports whether err is a worker's intake stream refusing an
// input past its limits (quotas, PROTOCOL.md §4.2): JetStream's 10077
// "maximum bytes exceeded" or "maximum messages exceeded"; nothing was
// stored.
func QuotaRefusal(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || uint16(apiErr.ErrorCode) != codeMaxExceeded {
		return false
	}
	return strings.Contains(apiErr.Description, "maximum bytes exceeded") || strings.Contains(apiErr.Description, "maximum messages exceeded")
}
