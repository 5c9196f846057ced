package coordinator

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// dropCounter counts the messages a coordinator drops because they are not
// what the server would have sent it (a delivery from another stream or
// consumer, a reply to no append in flight): someone aimed them at its
// inboxes. It logs the first of each second, with how many came since the
// last line, so that a flood of them does not flood the log too.
type dropCounter struct {
	count atomic.Uint64
	log   *slog.Logger

	mu      sync.Mutex
	last    time.Time // of the last line logged
	since   uint64    // dropped since then
	nowFunc func() time.Time
}

func newDropCounter(log *slog.Logger, now func() time.Time) *dropCounter {
	return &dropCounter{log: log, nowFunc: now}
}

// drop counts one dropped message; where says which inbox got it.
func (d *dropCounter) drop(where string, err error) {
	d.count.Add(1)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.since++
	now := d.nowFunc()
	if now.Sub(d.last) < time.Second {
		return
	}
	d.log.Warn("dropped messages not sent by the server to this coordinator (someone aims at its inboxes)",
		"where", where, "dropped", d.since, "total", d.count.Load(), "err", err)
	d.last, d.since = now, 0
}
