package projector

// SetFireLimit lowers, for tests, the number of due deadlines an input
// fires from the deadline queue under revision 2 (events.MaxFiredPerInput),
// so that a few jobs exercise what a million would: deadlines carried over
// to later inputs, and fired first by the inputs that touch their jobs.
func SetFireLimit(p *Projector, n int) { p.fireLimit = n }
