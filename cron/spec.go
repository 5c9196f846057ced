// Package cron is the calendar of Tenure's schedules: a schedule's
// expression (standard five-field cron, its @ macros, and @every) and its
// time zone, given as a POSIX TZ rule, and the instants at which it falls
// due. It is pure (no clock, no files, no randomness), because the fold
// computes a schedule's fires from it, and a replay must compute the same
// ones on any machine, whatever time zone database that machine has: the
// zone travels in the log as its rule (package tzdb turns an IANA name
// into one), not as a name looked up at replay.
//
// # Expressions
//
// Five fields, separated by blanks: minute (0-59), hour (0-23), day of the
// month (1-31), month (1-12 or JAN-DEC), day of the week (0-7 or
// SUN-SAT; 0 and 7 are Sunday). A field is a list of items separated by
// commas; an item is *, a value, or a range lo-hi, each optionally
// followed by /step (a value followed by /step means value-max/step).
// Names are case-insensitive. As in Vixie cron, when both day fields are
// restricted (neither begins with *), a day matches when either matches;
// otherwise both must. The macros: @yearly (@annually), @monthly,
// @weekly, @daily (@midnight), @hourly, and @every D with D a Go duration
// of whole milliseconds from 1s to 366 days. An expression that can never
// fall due (0 0 30 2 *) is refused, as is a sixth field.
//
// # Fires, and the wall clock's jumps
//
// A five-field expression falls due at every local time (to the minute)
// that matches it, in its zone, with two rules for the hours a daylight
// saving change skips or repeats, as users of cron expect:
//   - a local time that occurs twice (clocks go back) falls due once, at
//     its first occurrence;
//   - a local time that does not occur (clocks go forward) falls due at
//     the instant the gap ends, once however many matching times the gap
//     holds.
//
// @every D falls due at anchor + k*D for k = 1, 2, ..., with anchor the
// instant the schedule was set; it has no zone. Instants are Unix
// nanoseconds, the fold's stored time, and never after the year 2261 (the
// last whole year of int64 nanoseconds): past that a schedule ends.
package cron

import (
	"errors"
	"strconv"
	"strings"
	"time"
)

// MaxExprLen bounds an expression's length in bytes.
const MaxExprLen = 256

// MinEvery and MaxEvery bound @every's duration.
const (
	MinEvery = time.Second
	MaxEvery = 366 * 24 * time.Hour
)

// Spec is a parsed schedule expression.
type Spec struct {
	every   int64  // ns; > 0 for @every, else the fields below
	minute  uint64 // bits 0..59
	hour    uint32 // bits 0..23
	dom     uint32 // bits 1..31
	month   uint16 // bits 1..12
	dow     uint8  // bits 0..6
	domStar bool   // the day-of-month field began with *
	dowStar bool   // the day-of-week field began with *
}

// ErrSyntax wraps every refusal of Parse.
var ErrSyntax = errors.New("cron: bad expression")

func syntaxf(format string, args ...string) error {
	s := format
	for _, a := range args {
		s = strings.Replace(s, "%s", strconv.Quote(a), 1)
	}
	return errors.Join(ErrSyntax, errors.New(s))
}

var macros = map[string]string{
	"@yearly":   "0 0 1 1 *",
	"@annually": "0 0 1 1 *",
	"@monthly":  "0 0 1 * *",
	"@weekly":   "0 0 * * 0",
	"@daily":    "0 0 * * *",
	"@midnight": "0 0 * * *",
	"@hourly":   "0 * * * *",
}

var monthNames = []string{"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"}
var dayNames = []string{"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"}

// Parse parses a schedule expression (see the package comment).
func Parse(expr string) (*Spec, error) {
	if len(expr) > MaxExprLen {
		return nil, syntaxf("longer than " + strconv.Itoa(MaxExprLen) + " bytes")
	}
	e := strings.TrimSpace(expr)
	if strings.HasPrefix(e, "@") {
		name, arg, _ := strings.Cut(e, " ")
		name = strings.ToLower(name)
		if name == "@every" {
			return parseEvery(strings.TrimSpace(arg))
		}
		m, ok := macros[name]
		if !ok || strings.TrimSpace(arg) != "" {
			return nil, syntaxf("unknown macro %s (want @yearly, @monthly, @weekly, @daily, @hourly or @every D)", e)
		}
		e = m
	}
	f := strings.Fields(e)
	if len(f) != 5 {
		return nil, syntaxf("want 5 fields (minute hour day-of-month month day-of-week), got "+strconv.Itoa(len(f))+": %s", e)
	}
	s := &Spec{}
	var err error
	var bits uint64
	if s.minute, err = parseField(f[0], "minute", 0, 59, nil); err != nil {
		return nil, err
	}
	if bits, err = parseField(f[1], "hour", 0, 23, nil); err != nil {
		return nil, err
	}
	s.hour = uint32(bits)
	if bits, err = parseField(f[2], "day of month", 1, 31, nil); err != nil {
		return nil, err
	}
	s.dom = uint32(bits)
	if bits, err = parseField(f[3], "month", 1, 12, monthNames); err != nil {
		return nil, err
	}
	s.month = uint16(bits)
	if bits, err = parseField(f[4], "day of week", 0, 7, dayNames); err != nil {
		return nil, err
	}
	if bits&(1<<7) != 0 {
		bits = bits&^(1<<7) | 1
	}
	s.dow = uint8(bits)
	s.domStar = strings.HasPrefix(f[2], "*")
	s.dowStar = strings.HasPrefix(f[4], "*")
	if s.dowStar && !s.someDay() {
		return nil, syntaxf("never falls due (no month has that day): %s", e)
	}
	return s, nil
}

func parseEvery(arg string) (*Spec, error) {
	d, err := time.ParseDuration(arg)
	if err != nil {
		return nil, syntaxf("@every wants a duration such as 90s or 1h30m, got %s", arg)
	}
	if d < MinEvery || d > MaxEvery {
		return nil, syntaxf("@every %s is outside 1s to 366 days", arg)
	}
	if d%time.Millisecond != 0 {
		return nil, syntaxf("@every %s is not whole milliseconds", arg)
	}
	return &Spec{every: int64(d)}, nil
}

// someDay reports whether some month of s has some day of its dom (the
// day of the week unrestricted): February counts its 29th.
func (s *Spec) someDay() bool {
	for m := 1; m <= 12; m++ {
		if s.month&(1<<m) == 0 {
			continue
		}
		for d := 1; d <= maxDays[m]; d++ {
			if s.dom&(1<<d) != 0 {
				return true
			}
		}
	}
	return false
}

var maxDays = [13]int{0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}

// parseField parses one field into a bit set of values lo..hi.
func parseField(f, what string, lo, hi int, names []string) (uint64, error) {
	var bits uint64
	for item := range strings.SplitSeq(f, ",") {
		rng, stepText, hasStep := strings.Cut(item, "/")
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepText)
			if err != nil || n < 1 || n > hi-lo+1 {
				return 0, syntaxf(what+": bad step %s", stepText)
			}
			step = n
		}
		a, b := lo, hi
		switch {
		case rng == "*":
		case rng == "":
			return 0, syntaxf(what+": empty item in %s", f)
		default:
			x, y, isRange := strings.Cut(rng, "-")
			var err error
			if a, err = value(x, what, lo, hi, names); err != nil {
				return 0, err
			}
			switch {
			case isRange:
				if b, err = value(y, what, lo, hi, names); err != nil {
					return 0, err
				}
				if a > b {
					return 0, syntaxf(what+": range %s runs backwards", rng)
				}
			case !hasStep:
				b = a
			}
		}
		for v := a; v <= b; v += step {
			bits |= 1 << v
		}
	}
	return bits, nil
}

func value(s, what string, lo, hi int, names []string) (int, error) {
	for i, n := range names {
		if strings.EqualFold(s, n) {
			return i + lo, nil
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi || s[0] == '+' || s[0] == '-' {
		return 0, syntaxf(what+": %s is not a value from "+strconv.Itoa(lo)+" to "+strconv.Itoa(hi), s)
	}
	return n, nil
}

// Every is @every's duration in nanoseconds, 0 for a five-field spec.
func (s *Spec) Every() int64 { return s.every }

// lastNanos is the last instant a schedule falls due: the end of 2261.
var lastNanos = time.Date(2262, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano() - 1

// Next is the first instant after after (Unix ns) at which s falls due,
// in zone z (ignored by @every, whose fires are anchor + k*Every, k >= 1;
// a five-field spec ignores anchor). ok is false when there is none
// before the year 2262.
func (s *Spec) Next(z *Zone, anchor, after int64) (next int64, ok bool) {
	if s.every > 0 {
		k := int64(1)
		if after >= anchor {
			k = (after-anchor)/s.every + 1
		}
		if k > (lastNanos-anchor)/s.every {
			return 0, false
		}
		return anchor + k*s.every, true
	}
	afterSec := after / 1e9
	if after < 0 && after%1e9 != 0 {
		afterSec-- // floor
	}
	lo, _ := z.bounds()
	// An instant local time l maps to is at most l - lo (the zone's
	// lowest offset): so no l below afterSec + lo maps after after.
	l := floorMinute(afterSec + int64(lo))
	for range 1 << 20 { // each pass moves l forward; a zone's jumps are bounded
		var found bool
		if l, found = s.nextLocal(l); !found {
			return 0, false
		}
		at := z.instant(l)
		if at > lastNanos/1e9 {
			return 0, false
		}
		if at*1e9 > after {
			return at * 1e9, true
		}
		l += 60
	}
	return 0, false
}

func floorMinute(sec int64) int64 {
	m := sec / 60
	if sec < 0 && sec%60 != 0 {
		m--
	}
	return m * 60
}

// nextLocal is the first local time (naive seconds, a whole minute) at or
// after l that matches s.
func (s *Spec) nextLocal(l int64) (int64, bool) {
	t := time.Unix(l, 0).UTC()
	for t.Year() < 2262 {
		switch {
		case s.month&(1<<int(t.Month())) == 0:
			t = time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, time.UTC)
		case !s.dayMatches(t):
			t = time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, time.UTC)
		case s.hour&(1<<t.Hour()) == 0:
			t = time.Date(t.Year(), t.Month(), t.Day(), t.Hour()+1, 0, 0, 0, time.UTC)
		case s.minute&(1<<t.Minute()) == 0:
			t = t.Add(time.Minute)
		default:
			return t.Unix(), true
		}
	}
	return 0, false
}

func (s *Spec) dayMatches(t time.Time) bool {
	dom := s.dom&(1<<t.Day()) != 0
	dow := s.dow&(1<<int(t.Weekday())) != 0
	if s.domStar || s.dowStar {
		return dom && dow
	}
	return dom || dow
}

// Matches reports whether naive local time (a wall clock reading, whole
// minutes) matches a five-field s; @every matches none.
func (s *Spec) Matches(wall time.Time) bool {
	if s.every > 0 {
		return false
	}
	return s.month&(1<<int(wall.Month())) != 0 && s.dayMatches(wall) &&
		s.hour&(1<<wall.Hour()) != 0 && s.minute&(1<<wall.Minute()) != 0
}
