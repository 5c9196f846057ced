package jsmodel

import "time"

// LoseTail removes the last k messages of s (all of them if it holds
// fewer), as a server whose machine crashed before it synced them to disk
// (a file store with a sync interval, JetStream's default, or Tenure's
// --sync interval) finds its stream after it restarts: its last sequence
// goes back, the next message stored takes the first sequence lost (the
// sequences are used again by other messages), the duplicate window
// forgets the lost messages' ids (the server rebuilds it from the messages
// it holds) and keeps the others', and atomic batches being assembled are
// gone (they lived in the server's memory). A reader (a consumer) whose
// next sequence is past the new end waits for the stream to reach it
// again: the messages stored at the sequences lost before then never
// reach it. Each of these is what the real server does
// (TestConformLostTail). It returns the messages lost, oldest first.
func (s *Stream) LoseTail(k int) []Msg {
	k = min(k, len(s.Msgs))
	if k <= 0 {
		return nil
	}
	keep := len(s.Msgs) - k
	lost := append([]Msg(nil), s.Msgs[keep:]...)
	s.Msgs = s.Msgs[:keep:keep]
	for id, e := range s.dedup {
		if e.seq > uint64(keep) {
			delete(s.dedup, id)
		}
	}
	clear(s.batches)
	return lost
}

// LoseTails is a crash of the server's machine (Faults have nothing to do
// with it: the simulator calls it): each stream loses the messages it
// stored after its last sync (inSynced, outSynced: a file store syncs
// each stream on a timer of its own), as Stream.LoseTail says, and every
// client's connection is established again (Backend.Reconnects). Operations
// in the net are left alone: a request in flight reaches the restarted
// server, a reply or a message read in flight reaches its actor, as they
// would had the server restarted in the instant. It returns the messages
// each stream lost.
func (n *Net) LoseTails(inSynced, outSynced time.Time) (in, out []Msg) {
	n.mu.Lock()
	defer n.mu.Unlock()
	after := func(s *Stream, synced time.Time) int {
		k := 0
		for i := len(s.Msgs) - 1; i >= 0 && s.Msgs[i].Time.After(synced); i-- {
			k++
		}
		return k
	}
	in = n.model.In.LoseTail(after(n.model.In, inSynced))
	out = n.model.Out.LoseTail(after(n.model.Out, outSynced))
	n.crashes++
	n.Counts["crash-lost-tail"]++
	n.Counts["lost-input"] += len(in)
	n.Counts["lost-decision"] += len(out)
	return in, out
}

// SpoilSnapshot changes one byte of the stored snapshot (a tampered or
// rotted object, its size and headers kept): a coordinator that restores
// it finds that its bytes do not hash to its anchor, and refuses it. It
// reports whether a snapshot was stored. (Faults.StaleSnapshot spoils a
// snapshot as it is stored; this one, at a moment the simulator chooses.)
func (n *Net) SpoilSnapshot() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	o := n.model.Snap
	if o == nil || len(o.Data) == 0 {
		return false
	}
	data := append([]byte(nil), o.Data...)
	data[len(data)/2] ^= 0x5a
	o.Data = data
	n.Counts["spoiled-snapshot"]++
	return true
}
