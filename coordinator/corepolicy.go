package coordinator

// The core's policies of time: how long the leadership lasts, when a
// snapshot is due, when a chain head is. Like the rest of the core (core.go)
// they read no clock (the loop hands them its time, Unix ns), do no I/O and
// start no goroutine; the loop arms its timers from them and does what they
// decide. core_test.go drives them without a server
// (testdata/core/leader.txt, snapshots.txt, heads.txt).

import (
	"time"

	"github.com/maknow/tenure/events"
)

// policy is the configuration the core's policies read (the Config's, set
// by the session that owns the core; zero in a core a test builds, which
// sets what it drives).
type policy struct {
	leaderTTL        time.Duration // Config.LeaderTTL
	snapshotEvery    int           // Config.SnapshotEvery (< 0: no snapshots)
	snapshotInterval time.Duration // Config.SnapshotInterval
	headInterval     time.Duration // Config.HeadInterval
}

// leaderState is what the core knows of its leadership: validUntil (Unix
// ns), the start of the last renewal that succeeded (or the time the entry
// was taken) plus the TTL less leaderMargin. The entry cannot have expired
// before then, since the server counts its TTL from a moment after that
// start; it never goes back.
type leaderState struct {
	validUntil int64
}

// leaderTaken records the leadership entry taken (created, or
// compare-and-set) by a request started at at.
func (k *core) leaderTaken(at int64) {
	k.lead.validUntil = at + int64(k.pol.leaderTTL-leaderMargin(k.pol.leaderTTL))
}

// leaderRenewed records a renewal that succeeded, started at started: it
// moves validUntil, never back (a renewal started earlier may be reported
// later).
func (k *core) leaderRenewed(started int64) {
	if v := started + int64(k.pol.leaderTTL-leaderMargin(k.pol.leaderTTL)); v > k.lead.validUntil {
		k.lead.validUntil = v
	}
}

// leaderValid reports whether the leadership cannot have expired at now.
func (k *core) leaderValid(now int64) bool { return now < k.lead.validUntil }

// leaderValidUntil is the time the loop's expiry timer is armed for.
func (k *core) leaderValidUntil() time.Time { return time.Unix(0, k.lead.validUntil) }

// snapshotDue reports whether a snapshot of the state as it is should be
// taken at now: snapshots are on and the rules know them (revision 2 on),
// inputs were folded since the last, every decision derived is chained
// (the state is one the chain names), and either SnapshotEvery inputs were
// folded since, or, when the snapshot timer fired (timer),
// SnapshotInterval passed since the last was taken (now is read only
// then). Whether the loop can take one (the encoder free, no snapshot
// waiting for its anchor) is the loop's to know.
func (k *core) snapshotDue(now int64, timer bool) bool {
	if !k.snapshotsOn() {
		return false
	}
	if k.sinceSnap == 0 || k.headSeq != k.decSeq {
		return false
	}
	return k.sinceSnap >= k.pol.snapshotEvery || timer && now-k.snapAt >= int64(k.pol.snapshotInterval)
}

// snapshotsOn reports whether this coordinator takes snapshots of the
// state as it is: they are on, and its rules know them (revision 2 on).
func (k *core) snapshotsOn() bool {
	return k.pol.snapshotEvery >= 0 && k.p.Revision() >= events.Revision2
}

// headWanted reports whether a signed chain head of the last decision the
// stream acknowledged should be published at now, given the last head
// this coordinator published (lastSeq 0: none; lastAt its time, Unix
// ns): a decision was acknowledged and the head moved since, or the last
// head will be HeadRefresh old before the next head tick.
func (k *core) headWanted(now int64, lastSeq uint64, lastAt int64) bool {
	if k.acked == 0 {
		return false // no decision yet: nothing to sign
	}
	return lastSeq != k.acked || now-lastAt+int64(k.pol.headInterval/2) >= int64(HeadRefresh)
}

// headOf is the head the core would sign: the last decision acknowledged,
// its chain value and the input it answers.
func (k *core) headOf() (seq uint64, chain events.Chain, cause uint64) {
	return k.acked, k.ackedChain, k.ackedCause
}
