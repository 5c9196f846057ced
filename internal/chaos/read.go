package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/streams"
)

// ReadLog reads both streams of the default topology, each up to the last
// sequence its info reported when the read began (the decision stream's
// first, so that every decision read has its cause among the inputs read).
//
// With prev, a log read earlier from the same streams, only the messages
// after prev's are read, and prev's are kept: the streams deny deletes and
// purges, so what was stored stays. Use prev only while nothing can have
// lost stored messages (a server killed without its store synced could);
// a stream now shorter than prev is read again in full.
func ReadLog(ctx context.Context, js jetstream.JetStream, prev *Log) (*Log, error) {
	top := streams.Topology{}
	out, err := js.Stream(ctx, top.DecisionStream())
	if err != nil {
		return nil, fmt.Errorf("chaos: decision stream: %w", streams.Classify(err))
	}
	oi, err := out.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("chaos: decision stream: %w", streams.Classify(err))
	}
	in, err := js.Stream(ctx, top.InputStream())
	if err != nil {
		return nil, fmt.Errorf("chaos: input stream: %w", streams.Classify(err))
	}
	ii, err := in.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("chaos: input stream: %w", streams.Classify(err))
	}
	l := &Log{InputLast: ii.State.LastSeq, DecisionLast: oi.State.LastSeq}
	var oldIn, oldOut []Message
	if prev != nil && prev.InputLast <= l.InputLast && prev.DecisionLast <= l.DecisionLast {
		oldIn, oldOut = prev.Inputs, prev.Decisions
	}
	if l.Decisions, err = readStream(ctx, out, oldOut, l.DecisionLast); err != nil {
		return nil, err
	}
	if l.Inputs, err = readStream(ctx, in, oldIn, l.InputLast); err != nil {
		return nil, err
	}
	return l, nil
}

// readStream reads a stream after the messages it already has (from its
// first message if none) up to sequence last.
func readStream(ctx context.Context, s jetstream.Stream, have []Message, last uint64) ([]Message, error) {
	from := uint64(1)
	if len(have) > 0 {
		from = have[len(have)-1].Seq + 1
	}
	out := have[:len(have):len(have)] // appending never writes into prev's array
	if last < from {
		return out, nil
	}
	name := s.CachedInfo().Config.Name
	// A plain ephemeral consumer, deleted after the read (and by the server
	// if the reader dies), so that checks leave nothing behind on a cluster.
	cfg := jetstream.ConsumerConfig{
		DeliverPolicy: jetstream.DeliverAllPolicy, AckPolicy: jetstream.AckNonePolicy,
		MemoryStorage: true, Replicas: 1, InactiveThreshold: 10 * time.Second,
	}
	if from > 1 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from
	}
	cons, err := s.CreateConsumer(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("chaos: read %s: %w", name, streams.Classify(err))
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.DeleteConsumer(dctx, cons.CachedInfo().Name)
	}()
	idle := time.Now()
	for {
		batch, err := cons.Fetch(4096, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return nil, fmt.Errorf("chaos: read %s: %w", name, streams.Classify(err))
		}
		n := 0
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				return nil, fmt.Errorf("chaos: read %s: %w", name, err)
			}
			if meta.Sequence.Stream > last {
				return out, nil
			}
			out = append(out, Message{Seq: meta.Sequence.Stream, Time: meta.Timestamp.UnixNano(),
				Subject: m.Subject(), Data: m.Data(), Header: m.Headers()})
			if meta.Sequence.Stream == last || meta.NumPending == 0 {
				return out, nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("chaos: read %s: %w", name, streams.Classify(err))
		}
		if n > 0 {
			idle = time.Now()
		} else if time.Since(idle) > 20*time.Second || ctx.Err() != nil {
			return nil, fmt.Errorf("chaos: read %s: nothing received for 20s after sequence %d (last %d)", name, from+uint64(len(out)-len(have))-1, last)
		}
	}
}

// Journals reads the journal files (*.jsonl) of a directory as they grow:
// each Read returns every whole entry written so far, reading only what
// was appended since the previous Read.
type Journals struct {
	dir     string
	offsets map[string]int64
	entries []Entry
}

// NewJournals reads the journals of dir.
func NewJournals(dir string) *Journals {
	return &Journals{dir: dir, offsets: make(map[string]int64)}
}

// Read returns the entries of every journal, those of each file in order.
func (j *Journals) Read() ([]Entry, error) {
	files, err := filepath.Glob(filepath.Join(j.dir, "*.jsonl"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	for _, path := range files {
		if err := j.readFile(path); err != nil {
			return nil, err
		}
	}
	return j.entries, nil
}

func (j *Journals) readFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("chaos: journal: %w", err)
	}
	defer f.Close()
	off := j.offsets[path]
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return fmt.Errorf("chaos: journal: %w", err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return fmt.Errorf("chaos: journal: %w", err)
	}
	end := bytes.LastIndexByte(data, '\n') + 1 // a partial last line waits
	for _, line := range bytes.Split(data[:end], []byte{'\n'}) {
		if len(line) == 0 {
			continue
		}
		var e Entry
		if err := json.Unmarshal(line, &e); err != nil {
			return fmt.Errorf("chaos: journal %s: %w", path, err)
		}
		j.entries = append(j.entries, e)
	}
	j.offsets[path] = off + int64(end)
	return nil
}
