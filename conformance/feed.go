package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// entry is one thing the runner saw: an adapter event, a stored decision
// or a stored input, as a JSON object.
type entry struct {
	seq     uint64 // stream sequence (decisions, inputs); 0 for events
	subject string // stream subject (decisions, inputs)
	v       map[string]any
}

// feed is a growing log of entries that steps wait on.
type feed struct {
	mu      sync.Mutex
	entries []entry
	changed chan struct{} // closed and replaced when an entry is added
}

func newFeed() *feed { return &feed{changed: make(chan struct{})} }

func (f *feed) add(e entry) {
	f.mu.Lock()
	f.entries = append(f.entries, e)
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
}

func (f *feed) len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.entries)
}

// snapshot returns the entries from index from on.
func (f *feed) snapshot(from int) []entry {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]entry(nil), f.entries[min(from, len(f.entries)):]...)
}

// errNoMatch is what wait returns when nothing matched in time.
var errNoMatch = errors.New("no match")

// wait returns the first entry from index from on for which check
// returns nil, waiting for new ones until ctx ends. On a timeout its
// error names how many entries it looked at and why the last one (the
// nearest miss, for a projection) did not match.
func (f *feed) wait(ctx context.Context, from int, check func(entry) error) (entry, error) {
	i := from
	var last error
	for {
		f.mu.Lock()
		es, ch := f.entries[min(i, len(f.entries)):], f.changed
		f.mu.Unlock()
		for _, e := range es {
			i++
			err := check(e)
			if err == nil {
				return e, nil
			}
			if !errors.Is(err, errSkip) {
				last = err
			}
		}
		select {
		case <-ch:
		case <-ctx.Done():
			if last != nil {
				return entry{}, fmt.Errorf("%w among %d entries (last near miss: %v)", errNoMatch, i-from, last)
			}
			return entry{}, fmt.Errorf("%w among %d entries", errNoMatch, i-from)
		}
	}
}

// errSkip is a check's answer for an entry that is not even a candidate
// (another job, another kind of event): not reported as a near miss.
var errSkip = errors.New("skip")
