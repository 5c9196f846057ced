package coordinator

import (
	"time"

	"github.com/maknow/tenure/heads"
)

// HeadRefresh is the longest a live coordinator with a Config.HeadSigner
// goes without publishing a chain head, even when no decision was
// acknowledged meanwhile: an auditor keeping heads sees that it is alive.
const HeadRefresh = time.Minute

// publishHead publishes a signed chain head (PROTOCOL.md §20.3) of the
// last decision the stream acknowledged, when the core's policy wants one
// (headWanted: it moved since the last head this coordinator published, in
// this session or an earlier one, for a resynchronisation does not repeat a
// head; or that head is HeadRefresh old). It is a core NATS
// publish, which buffers: it never waits on the server. A head that cannot
// be signed or published is logged and tried again at the next tick.
func (s *session) publishHead(now time.Time) {
	c := s.c
	var lastSeq uint64
	var lastAt int64
	if last := c.lastHead.Load(); last != nil {
		lastSeq, lastAt = last.Seq, last.At.UnixNano()
	}
	if !s.headWanted(now.UnixNano(), lastSeq, lastAt) {
		return
	}
	seq, chain, cause := s.headOf()
	h, err := heads.Sign(c.cfg.HeadSigner, heads.Head{
		Stream: c.cfg.Topology.DecisionStream(), Seq: seq, Chain: chain, InputSeq: cause,
		At: now, Coordinator: c.cfg.ID,
	})
	if err != nil {
		c.log.Warn("chain head not signed", "decision_seq", seq, "err", err)
		return
	}
	b, err := h.MarshalJSON()
	if err == nil {
		err = c.jsb.nc.Publish(c.cfg.Topology.HeadSubject(), b)
	}
	if err != nil {
		c.log.Warn("chain head not published", "decision_seq", seq, "err", err)
		return
	}
	c.lastHead.Store(&h)
}
