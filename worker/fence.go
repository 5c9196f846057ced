package worker

import (
	"fmt"
	"sync"
)

// Fence guards a resource against side effects from stale lease holders: it
// remembers, per job, the highest generation it has admitted, and refuses
// older ones. Put one in front of the resource (or keep its state beside
// the resource's data) and call Admit with the token that came with each
// write. The zero value is ready to use; a Fence is safe for concurrent use.
type Fence struct {
	mu      sync.Mutex
	highest map[string]uint64
}

// Admit accepts t if its generation is at least the highest admitted for
// its job (and records it), and returns an error matching
// ErrStaleGeneration otherwise.
func (f *Fence) Admit(t FencingToken) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if h := f.highest[t.Job]; t.Generation < h {
		return fmt.Errorf("%w: job %s: token generation %d, fence has seen %d", ErrStaleGeneration, t.Job, t.Generation, h)
	}
	if f.highest == nil {
		f.highest = make(map[string]uint64)
	}
	f.highest[t.Job] = t.Generation
	return nil
}

// Highest is the highest generation admitted for job (0: none).
func (f *Fence) Highest(job string) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.highest[job]
}
