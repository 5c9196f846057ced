package ui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/projector"
	"github.com/maknow/tenure/streams"
)

// HistoryDecision is one stored decision about a job, with what the job
// page draws and lists. Times are Unix milliseconds. In a partitioned
// deployment, Seq and Cause are sequences of the job's partition's streams.
type HistoryDecision struct {
	Seq        uint64          `json:"seq"`   // decision stream sequence
	Cause      uint64          `json:"cause"` // input stream sequence
	N          uint32          `json:"n"`
	Of         uint32          `json:"of"`
	At         int64           `json:"at"`
	Kind       string          `json:"kind"`
	Accepted   bool            `json:"accepted"`
	Derived    bool            `json:"derived"`
	Reason     string          `json:"reason"`
	Detail     string          `json:"detail,omitempty"`
	Generation uint64          `json:"generation"` // the job's generation after the decision
	Describe   string          `json:"describe"`   // projector.Describe
	Matrix     []string        `json:"matrix"`     // its evidence-matrix row (seed 000 §13)
	Decision   json.RawMessage `json:"decision"`   // the decision as stored
}

// HistoryInput is a stored input that caused decisions about the job.
type HistoryInput struct {
	Seq     uint64 `json:"seq"` // input stream sequence (of the job's partition's stream)
	At      int64  `json:"at"`  // stored time
	AtText  string `json:"at_text"`
	Subject string `json:"subject"`
	Role    string `json:"role"`
	Actor   string `json:"actor"`
	Verb    string `json:"verb"`
	Body    string `json:"body"`
	// LeaseID and Generation are the lease the input names about the job
	// (for a batch renew, its element for the job), if it decodes.
	LeaseID    string `json:"lease_id,omitempty"`
	Generation uint64 `json:"generation,omitempty"`
	Missing    bool   `json:"missing,omitempty"` // not found in the input stream
	// Redacted says that Body and LeaseID are left out: the page is a
	// viewer's (package doc: What a viewer sees).
	Redacted bool `json:"redacted,omitempty"`
}

// History is a job page's data: the job's row, its decisions and the
// inputs that caused them, read from the streams of the job's partition
// (Row.Partition) in a partitioned deployment.
type History struct {
	Row       Row               `json:"row"`
	Decisions []HistoryDecision `json:"decisions"`
	Inputs    []HistoryInput    `json:"inputs"`
	Columns   []string          `json:"columns"` // projector.MatrixColumns
	Skipped   int               `json:"skipped"` // older decisions left out
	Seq       uint64            `json:"seq"`
	Now       int64             `json:"now"`
	// Redacted says that lease ids, payloads and input bodies are hidden:
	// the page is a viewer's.
	Redacted bool `json:"redacted,omitempty"`
}

const fetchers = 8

// fetch reads the messages at seqs of stream in parallel, in order.
func fetch(ctx context.Context, st jetstream.Stream, seqs []uint64) ([]*jetstream.RawStreamMsg, error) {
	out := make([]*jetstream.RawStreamMsg, len(seqs))
	errs := make([]error, len(seqs))
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(fetchers, len(seqs)) {
		wg.Go(func() {
			for i := range next {
				out[i], errs[i] = st.GetMsg(ctx, seqs[i])
			}
		})
	}
	for i := range seqs {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, err := range errs {
		if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, fmt.Errorf("ui: read message %d: %w", seqs[i], streams.Classify(err))
		}
	}
	return out, nil
}

// history reads job id's decisions after decision sequence after (0: all,
// at most MaxHistory) and their inputs, from the streams of the job's
// partition; for a viewer, without lease ids, payloads and input bodies.
func (s *Server) history(ctx context.Context, id string, after uint64, viewer bool) (*History, bool, error) {
	row, seqs, skipped, ok := s.model.job(id, s.cfg.MaxHistory)
	if !ok {
		return nil, false, nil
	}
	if after > 0 {
		i, _ := slices.BinarySearch(seqs, after+1)
		seqs, skipped = seqs[i:], 0
	}
	if viewer {
		row = row.redacted()
	} else {
		rows := []Row{row}
		s.withDetails(ctx, rows)
		row = rows[0]
	}
	h := &History{Row: row, Columns: projector.MatrixColumns, Skipped: skipped, Seq: row.LastSeq,
		Decisions: []HistoryDecision{}, Inputs: []HistoryInput{}, Redacted: viewer}
	if len(seqs) == 0 {
		return h, true, nil
	}
	top := s.topos[events.PartitionOf(id, s.cfg.Partitions)]
	out, err := s.js.Stream(ctx, top.DecisionStream())
	if err != nil {
		return nil, true, fmt.Errorf("ui: decision stream %s: %w", top.DecisionStream(), streams.Classify(err))
	}
	in, err := s.js.Stream(ctx, top.InputStream())
	if err != nil {
		return nil, true, fmt.Errorf("ui: input stream %s: %w", top.InputStream(), streams.Classify(err))
	}
	msgs, err := fetch(ctx, out, seqs)
	if err != nil {
		return nil, true, err
	}
	var causes []uint64
	for i, m := range msgs {
		if m == nil {
			continue
		}
		d, err := events.DecodeDecision(m.Data)
		if err != nil {
			continue
		}
		data := m.Data
		if viewer {
			// The decision as stored, less the lease id and payload: the
			// same drawing, no capability.
			d.Job = redactedJob(d.Job)
			data = events.AppendDecision(nil, &d)
		}
		r := projector.MatrixRow(&d, projector.MatrixOptions{})
		h.Decisions = append(h.Decisions, HistoryDecision{
			Seq: seqs[i], Cause: d.Cause, N: d.N, Of: d.Of, At: ms(d.At), Kind: d.Kind.String(),
			Accepted: d.Kind.Accepted(), Derived: d.Kind.Derived(), Reason: string(d.Reason), Detail: d.Detail,
			Generation: d.Job.Generation, Describe: projector.Describe(&d, 0), Matrix: r[:], Decision: data,
		})
		if len(causes) == 0 || causes[len(causes)-1] != d.Cause {
			causes = append(causes, d.Cause)
		}
	}
	slices.Sort(causes)
	causes = slices.Compact(causes)
	ins, err := fetch(ctx, in, causes)
	if err != nil {
		return nil, true, err
	}
	for i, m := range ins {
		hi := HistoryInput{Seq: causes[i]}
		if m == nil {
			hi.Missing = true
			h.Inputs = append(h.Inputs, hi)
			continue
		}
		hi.At, hi.AtText, hi.Subject = ms(m.Time.UnixNano()), events.FormatTime(m.Time.UnixNano()), m.Subject
		// The subject as PROTOCOL.md describes it: without the partition token.
		subject, _ := top.Partition.StripInput(m.Subject)
		if sub, err := events.ParseInputSubject(subject); err == nil || sub.Role != events.RoleNone {
			hi.Role, hi.Actor, hi.Verb = sub.Role.String(), sub.Actor, sub.Verb.String()
		}
		var in events.Input
		if events.DecodeInput(subject, m.Data, &in) == nil {
			hi.LeaseID, hi.Generation = in.LeaseID, in.Generation
			for _, l := range in.Leases {
				if l.Job == id {
					hi.LeaseID, hi.Generation = l.LeaseID, l.Generation
					break
				}
			}
			for _, e := range in.Batch { // a batch ack or result (revision 7)
				if e.Job == id {
					hi.LeaseID, hi.Generation = e.LeaseID, e.Generation
					break
				}
			}
		}
		if viewer {
			hi.LeaseID, hi.Redacted = "", true // the generation it names stays: the timeline places it by that
		} else {
			hi.Body = string(m.Data)
		}
		h.Inputs = append(h.Inputs, hi)
	}
	return h, true, nil
}
