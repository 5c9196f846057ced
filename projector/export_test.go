package projector

import "github.com/maknow/tenure/events"

// SetFireLimit lowers, for tests, the number of due deadlines an input
// fires from the deadline queue under revision 2 (events.MaxFiredPerInput),
// so that a few jobs exercise what a million would: deadlines carried over
// to later inputs, and fired first by the inputs that touch their jobs.
func SetFireLimit(p *Projector, n int) { p.fireLimit = n }

// SetJob replaces the projection of an existing job, for tests that need a
// state no log of the tests' size reaches (counters at their limit, or a
// state no fold produces, to check that Restore refuses it).
func SetJob(p *Projector, j events.Job) {
	if cur := p.jobs[j.ID]; cur != nil {
		cur.Job = j
	}
}

// SetOfferLimit lowers, for tests, the offers one input's matching makes
// (events.MaxOffersPerInput).
func SetOfferLimit(p *Projector, n int) { p.offerLimit = n }

// Matchable reports whether some queue has a ready job and a free slot.
func Matchable(p *Projector) bool { return p.matchable() }

// QueueCount is the number of queues the projector indexes (memory).
func QueueCount(p *Projector) int { return len(p.queues) }

// CapacityEntries is the number of announcement expiries held for sweep.
func CapacityEntries(p *Projector) int { return len(p.expiries) }

// SetRevision moves p to rules revision rev with a zero lease key, for
// tests of a revision no coordinator moves a log to yet (revision 10 while
// it is built).
func SetRevision(p *Projector, rev uint32) { p.setRules(rev, [events.LeaseKeyLen]byte{}) }
