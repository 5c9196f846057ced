package worker

import "fmt"

// msgIDCollision handles a PubAck that calls the first attempt of p a
// duplicate. The SDK never sent p's Msg-Id before, so the stream holds
// another message under it: JetStream's duplicate window is stream-wide,
// and another publisher (a hostile worker, on its own subject) used this
// id first. Accepting the PubAck would adopt that message's sequence and
// silently drop p. Instead p gets a fresh id and is sent again, and the
// collision is reported to the ErrorHandler. Retries of an attempt that went
// out keep their id: a duplicate PubAck is then the normal idempotent case.
func (w *Worker) msgIDCollision(p *input, seq uint64) {
	old := p.msgID
	p.msgID, p.sent = w.newMsgID(), false
	w.report(fmt.Errorf("worker: %s %s: Nats-Msg-Id %s was already used by input %d of another publisher; resending with Msg-Id %s",
		p.verb, p.job, old, seq, p.msgID))
}
