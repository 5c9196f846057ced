package cron

import (
	"errors"
	"strconv"
)

// MaxZoneLen bounds a zone rule's length in bytes.
const MaxZoneLen = 128

// Zone is a time zone given by a POSIX TZ rule (the form of the footer of
// a version 2+ TZif file, and of the TZ variable), such as
// "CET-1CEST,M3.5.0,M10.5.0/3" or "<+0530>-5:30": a standard offset and,
// optionally, a daylight saving offset with the rule of the two yearly
// changes. It describes a zone as its rules stand (not its history),
// which is what a schedule's future fires need. "UTC" alone is UTC0.
type Zone struct {
	rule       string
	std, dst   int32 // offsets east of UTC, seconds
	hasDST     bool
	start, end change
}

// change is one of a rule's yearly changes: a date and the local time of
// day (seconds, may be negative or past a day) it happens at.
type change struct {
	kind    byte // 'J': Julian day 1..365, no Feb 29; 'n': day 0..365; 'M': month.week.day
	n       int  // kind J, n
	m, w, d int
	secs    int32
}

// ErrZone wraps every refusal of ParseZone.
var ErrZone = errors.New("cron: bad zone rule")

func zoneErr(rule, why string) error {
	return errors.Join(ErrZone, errors.New(strconv.Quote(rule)+": "+why))
}

// UTC is the zone of Coordinated Universal Time.
var UTC = &Zone{rule: "UTC0"}

// ParseZone parses a POSIX TZ rule. A rule with a daylight saving name
// must give its changes (",start[/time],end[/time]"): POSIX leaves the
// default to the implementation, and a schedule must mean the same
// everywhere.
func ParseZone(rule string) (*Zone, error) {
	if len(rule) > MaxZoneLen {
		return nil, zoneErr(rule[:16]+"…", "longer than "+strconv.Itoa(MaxZoneLen)+" bytes")
	}
	if rule == "UTC" {
		return UTC, nil
	}
	z := &Zone{rule: rule}
	p := &tzParser{s: rule}
	if !p.name() {
		return nil, zoneErr(rule, "want a zone name (3 or more letters, or <...>) first")
	}
	off, ok := p.offset(24)
	if !ok {
		return nil, zoneErr(rule, "want the standard offset after the name, as in EST5 or CET-1")
	}
	z.std = -off
	if p.done() {
		return z, nil
	}
	if !p.name() {
		return nil, zoneErr(rule, "want a daylight saving name after the offset")
	}
	z.dst = z.std + 3600
	if !p.done() && p.peek() != ',' {
		if off, ok = p.offset(24); !ok {
			return nil, zoneErr(rule, "bad daylight saving offset")
		}
		z.dst = -off
	}
	if p.done() {
		return nil, zoneErr(rule, "a daylight saving zone needs its rule (,start[/time],end[/time])")
	}
	var okS, okE bool
	if p.skip(',') {
		z.start, okS = p.change()
	}
	if okS && p.skip(',') {
		z.end, okE = p.change()
	}
	if !okS || !okE || !p.done() {
		return nil, zoneErr(rule, "bad daylight saving rule (want ,Mm.w.d[/time],Mm.w.d[/time], Jn or n)")
	}
	z.hasDST = z.std != z.dst
	return z, nil
}

// String is the rule.
func (z *Zone) String() string { return z.rule }

type tzParser struct {
	s string
	i int
}

func (p *tzParser) done() bool { return p.i == len(p.s) }
func (p *tzParser) peek() byte { return p.s[p.i] }
func (p *tzParser) skip(c byte) bool {
	if !p.done() && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isDigit(c byte) bool  { return c >= '0' && c <= '9' }

// name reads a zone abbreviation: 3 or more letters, or <...> of letters,
// digits, + and -.
func (p *tzParser) name() bool {
	j := p.i
	if p.skip('<') {
		for !p.done() && (isLetter(p.peek()) || isDigit(p.peek()) || p.peek() == '+' || p.peek() == '-') {
			p.i++
		}
		if p.i-j-1 < 3 || !p.skip('>') {
			return false
		}
		return true
	}
	for !p.done() && isLetter(p.peek()) {
		p.i++
	}
	return p.i-j >= 3
}

// num reads up to max digits; ok false without one.
func (p *tzParser) num(max int) (int, bool) {
	n, j := 0, p.i
	for !p.done() && isDigit(p.peek()) && p.i-j < max {
		n = n*10 + int(p.peek()-'0')
		p.i++
	}
	return n, p.i > j
}

// hms reads hh[:mm[:ss]] with hh at most maxH; seconds.
func (p *tzParser) hms(maxH int) (int32, bool) {
	h, ok := p.num(3)
	if !ok || h > maxH {
		return 0, false
	}
	secs := h * 3600
	for _, mul := range []int{60, 1} {
		if !p.skip(':') {
			break
		}
		v, ok := p.num(2)
		if !ok || v > 59 {
			return 0, false
		}
		secs += v * mul
	}
	return int32(secs), true
}

// offset reads [+-]hh[:mm[:ss]] (west of UTC is positive, as POSIX says).
func (p *tzParser) offset(maxH int) (int32, bool) {
	neg := false
	if p.skip('-') {
		neg = true
	} else {
		p.skip('+')
	}
	v, ok := p.hms(maxH)
	if neg {
		v = -v
	}
	return v, ok
}

// change reads a date and an optional /time (default 02:00:00; -167 to
// 167 hours, as RFC 8536 allows).
func (p *tzParser) change() (change, bool) {
	var c change
	var ok bool
	switch {
	case p.skip('J'):
		c.kind = 'J'
		c.n, ok = p.num(3)
		ok = ok && c.n >= 1 && c.n <= 365
	case p.skip('M'):
		c.kind = 'M'
		if c.m, ok = p.num(2); !ok || c.m < 1 || c.m > 12 || !p.skip('.') {
			return c, false
		}
		if c.w, ok = p.num(1); !ok || c.w < 1 || c.w > 5 || !p.skip('.') {
			return c, false
		}
		c.d, ok = p.num(1)
		ok = ok && c.d <= 6
	default:
		c.kind = 'n'
		c.n, ok = p.num(3)
		ok = ok && c.n <= 365
	}
	if !ok {
		return c, false
	}
	c.secs = 2 * 3600
	if p.skip('/') {
		if c.secs, ok = p.offset(167); !ok {
			return c, false
		}
	}
	return c, true
}

// day is the Unix day (days since 1970-01-01) of c in year y.
func (c change) day(y int) int64 {
	jan1 := daysFromCivil(y, 1, 1)
	switch c.kind {
	case 'J':
		d := int64(c.n - 1)
		if isLeap(y) && c.n >= 60 {
			d++
		}
		return jan1 + d
	case 'n':
		return jan1 + int64(c.n)
	}
	first := daysFromCivil(y, c.m, 1)
	dd := 1 + (c.d-weekday(first)+7)%7 + (c.w-1)*7
	days := maxDays[c.m]
	if c.m == 2 && !isLeap(y) {
		days = 28
	}
	for dd > days {
		dd -= 7
	}
	return first + int64(dd-1)
}

func isLeap(y int) bool { return y%4 == 0 && (y%100 != 0 || y%400 == 0) }

// weekday of Unix day d: 0 Sunday (1970-01-01 was a Thursday).
func weekday(d int64) int { return int(((d % 7) + 11) % 7) }

// daysFromCivil is the Unix day of y-m-d in the proleptic Gregorian
// calendar (H. Hinnant's algorithm, exact in integers).
func daysFromCivil(y, m, d int) int64 {
	if m <= 2 {
		y--
	}
	era := y / 400
	if y < 0 && y%400 != 0 {
		era--
	}
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return int64(era)*146097 + int64(doe) - 719468
}

// transition is an instant (Unix seconds) the offset changes at.
type transition struct {
	at    int64
	toDST bool
}

// transitions lists the changes of years y-1..y+1 in order (at equal
// instants the change to standard time first, so that a rule in daylight
// saving time all year, such as EST5EDT,0/0,J365/25, stays in it).
func (z *Zone) transitions(y int) [6]transition {
	var ts [6]transition
	for i := range 3 {
		yy := y - 1 + i
		ts[2*i] = transition{z.end.day(yy)*86400 + int64(z.end.secs) - int64(z.dst), false}
		ts[2*i+1] = transition{z.start.day(yy)*86400 + int64(z.start.secs) - int64(z.std), true}
	}
	// Insertion sort: six elements, stable.
	for i := 1; i < len(ts); i++ {
		for j := i; j > 0 && less(ts[j], ts[j-1]); j-- {
			ts[j], ts[j-1] = ts[j-1], ts[j]
		}
	}
	return ts
}

func less(a, b transition) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return !a.toDST && b.toDST
}

// yearOf is the year (UTC) of instant sec (H. Hinnant's civil from
// days, the year only).
func yearOf(sec int64) int {
	days := sec / 86400
	if sec < 0 && sec%86400 != 0 {
		days--
	}
	z := days + 719468
	era := z / 146097
	if z < 0 && z%146097 != 0 {
		era--
	}
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	y := yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	if mp := (5*doy + 2) / 153; mp >= 10 { // January or February
		y++
	}
	return int(y)
}

// Offset is the offset east of UTC (seconds) in force at instant sec
// (Unix seconds), and whether it is daylight saving time.
func (z *Zone) Offset(sec int64) (east int32, dst bool) {
	if !z.hasDST {
		return z.std, false
	}
	// The last change at or before sec (the year before has both).
	for _, t := range z.transitions(yearOf(sec)) {
		if t.at > sec {
			break
		}
		dst = t.toDST
	}
	if dst {
		return z.dst, true
	}
	return z.std, false
}

// bounds are the zone's lowest and highest offsets east.
func (z *Zone) bounds() (lo, hi int32) {
	if !z.hasDST {
		return z.std, z.std
	}
	return min(z.std, z.dst), max(z.std, z.dst)
}

// instant is the instant (Unix seconds) at which local time l (naive
// seconds) first occurs, or, for a local time the zone skips, the instant
// the gap ends.
func (z *Zone) instant(l int64) int64 {
	if !z.hasDST {
		return l - int64(z.std)
	}
	a, b := l-int64(z.std), l-int64(z.dst)
	_, dstA := z.Offset(a)
	_, dstB := z.Offset(b)
	okA, okB := !dstA, dstB
	switch {
	case okA && okB:
		return min(a, b)
	case okA:
		return a
	case okB:
		return b
	}
	// A gap: the change between the two readings ends it.
	lo, hi := min(a, b), max(a, b)
	for _, t := range z.transitions(yearOf(lo)) {
		if t.at > lo && t.at <= hi {
			return t.at
		}
	}
	for _, t := range z.transitions(yearOf(hi)) {
		if t.at > lo && t.at <= hi {
			return t.at
		}
	}
	return hi // unreachable for a parsed rule; the later reading
}
