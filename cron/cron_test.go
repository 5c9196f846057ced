package cron_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/maknow/tenure/cron"
	"github.com/maknow/tenure/cron/tzdb"
	"github.com/maknow/tenure/internal/testutil"
)

// zones are real zones of every shape: none, northern and southern
// daylight saving time, negative saving (Dublin), a 45-minute offset
// (Chatham), a half-hour saving (Lord Howe), changes at 24:00 (Cairo).
// Not Asia/Gaza or Africa/Casablanca: their database lists changes for
// each Ramadan until the 2080s, which no yearly rule describes (see
// package tzdb).
var zones = []string{
	"UTC", "Asia/Kolkata", "Asia/Tokyo", "America/Sao_Paulo",
	"Europe/Berlin", "Europe/London", "Europe/Dublin", "America/New_York",
	"America/Los_Angeles", "America/St_Johns", "Australia/Sydney",
	"Australia/Lord_Howe", "Pacific/Chatham", "America/Santiago",
	"Pacific/Auckland", "America/Havana", "Africa/Cairo", "Europe/Chisinau",
}

// tb is what the helpers need of a test (rapid.T is no testing.TB).
type tb interface {
	Helper()
	Fatalf(string, ...any)
}

func load(t tb, name string) (*cron.Zone, *time.Location) {
	t.Helper()
	z, rule, err := tzdb.Resolve(name)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if z.String() != rule {
		t.Fatalf("%s: zone %q, rule %q", name, z, rule)
	}
	return z, loc
}

// TestZoneIsTheDatabase: every change from 2038 to 2099 of each zone, as
// package time reads the same database, is where the rule puts it, with
// the same offset on each side (package time follows the footer rule
// past the end of its table, and so the two must agree exactly).
func TestZoneIsTheDatabase(t *testing.T) {
	for _, name := range zones {
		t.Run(name, func(t *testing.T) {
			z, loc := load(t, name)
			at := time.Date(2038, 2, 1, 0, 0, 0, 0, loc)
			end := time.Date(2100, 1, 1, 0, 0, 0, 0, loc)
			changes := 0
			for at.Before(end) {
				_, goOff := at.Zone()
				for _, probe := range []int64{at.Unix(), at.Unix() + 1800, at.Unix() + 86400} {
					_, off := time.Unix(probe, 0).In(loc).Zone()
					if got, _ := z.Offset(probe); int(got) != off {
						t.Fatalf("%s at %s: offset %d, package time %d", name, time.Unix(probe, 0).UTC(), got, off)
					}
				}
				_, next := at.ZoneBounds()
				if next.IsZero() {
					break
				}
				if !next.After(at) {
					// Package time's ZoneBounds past its table returns
					// at itself on the last day of a leap year (Go
					// 1.26; 2040-12-31 in Europe/Berlin): step over it.
					at = at.Add(time.Hour)
					continue
				}
				// The second before the change is on the old offset.
				before := next.Unix() - 1
				if got, _ := z.Offset(before); int(got) != goOff {
					t.Fatalf("%s the second before %s: offset %d, want %d", name, next.UTC(), got, goOff)
				}
				changes++
				at = next
			}
			if cron.UTC.String() != z.String() && strings.Contains(z.String(), ",") && changes < 100 {
				t.Fatalf("%s: only %d changes in 62 years of a daylight saving rule", name, changes)
			}
		})
	}
}

// walls are package time's wall clock readings (naive seconds) of each
// minute from from to to.
func walls(loc *time.Location, from, to int64) []int64 {
	var out []int64
	for t := from; t <= to; t += 60 {
		w := time.Unix(t, 0).In(loc)
		out = append(out, time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), 0, time.UTC).Unix())
	}
	return out
}

// reference lists the fires of spec in (from, from+60*(len(walls)-1)]
// by stepping minute by minute through package time's wall clock: at
// each minute t it fires when some local minute after the highest
// reading seen so far, up to t's reading, matches (the first occurrence
// of a repeated time; the end of a gap for skipped ones).
func reference(spec *cron.Spec, from int64, walls []int64) []int64 {
	var fires []int64
	maxWall := walls[0]
	for i, w := range walls[1:] {
		if w > maxWall {
			for l := maxWall + 60; l <= w; l += 60 {
				if spec.Matches(time.Unix(l, 0).UTC()) {
					fires = append(fires, (from+60*int64(i+1))*1e9)
					break
				}
			}
			maxWall = w
		}
	}
	return fires
}

func fires(t tb, spec *cron.Spec, z *cron.Zone, from, to int64) []int64 {
	var out []int64
	at := from * 1e9
	for {
		next, ok := spec.Next(z, 0, at)
		if !ok || next > to*1e9 {
			return out
		}
		if next <= at {
			t.Fatalf("Next(%d) = %d, not after", at, next)
		}
		out = append(out, next)
		at = next
	}
}

// changesNear lists instants (Unix seconds, whole minutes) around the
// zone's changes in years.
func changesNear(loc *time.Location, years ...int) []int64 {
	var out []int64
	for _, y := range years {
		at := time.Date(y, 1, 1, 0, 0, 0, 0, loc)
		for range 2 {
			_, next := at.ZoneBounds()
			if next.IsZero() || next.Year() > y {
				break
			}
			out = append(out, next.Unix())
			at = next
		}
	}
	if len(out) == 0 {
		out = append(out, time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC).Unix())
	}
	return out
}

var specs = []string{
	"* * * * *", "30 2 * * *", "*/15 2 * * *", "0 * * * *", "45 1,2,3 * * *",
	"0 0 * * 0", "59 23 31 12 *", "0 2 * 3,10 SUN", "5-10/2 0-3 * * *",
	"0 12 1 * MON-FRI", "@hourly", "@daily", "15 2 * * 0",
}

// TestNextIsTheWallClock: around each zone's changes, the fires of
// table specs and random ones are exactly the reference's.
func TestNextIsTheWallClock(t *testing.T) {
	for _, name := range zones {
		z, loc := load(t, name)
		near := changesNear(loc, 2027)
		for _, c := range near {
			from, to := c-26*3600, c+26*3600
			ws := walls(loc, from, to)
			for _, expr := range specs {
				spec, err := cron.Parse(expr)
				if err != nil {
					t.Fatal(err)
				}
				want := reference(spec, from, ws)
				got := fires(t, spec, z, from, to)
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("%s %q around %s:\n got %s\nwant %s", name, expr, time.Unix(c, 0).UTC(), show(got, loc), show(want, loc))
				}
			}
		}
	}
	rapid.Check(t, func(rt *rapid.T) {
		name := rapid.SampledFrom(zones).Draw(rt, "zone")
		z, loc := load(rt, name)
		expr := genExpr().Draw(rt, "expr")
		spec, err := cron.Parse(expr)
		if err != nil {
			rt.Skip(err)
		}
		near := changesNear(loc, 2027, 2052)
		c := rapid.SampledFrom(near).Draw(rt, "change") + 60*rapid.Int64Range(-1500, 1500).Draw(rt, "shift")
		from, to := c-26*3600, c+26*3600
		want := reference(spec, from, walls(loc, from, to))
		got := fires(rt, spec, z, from, to)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			rt.Fatalf("%s %q from %s:\n got %s\nwant %s", name, expr, time.Unix(from, 0).UTC(), show(got, loc), show(want, loc))
		}
	})
}

func show(fs []int64, loc *time.Location) string {
	var b strings.Builder
	if len(fs) > 12 {
		fmt.Fprintf(&b, "(%d fires; the first 12) ", len(fs))
		fs = fs[:12]
	}
	for _, f := range fs {
		b.WriteString(time.Unix(0, f).In(loc).Format("01-02T15:04 MST "))
	}
	return b.String()
}

func genExpr() *rapid.Generator[string] {
	field := func(lo, hi int) *rapid.Generator[string] {
		return rapid.Custom(func(t *rapid.T) string {
			n := rapid.IntRange(1, 3).Draw(t, "items")
			var items []string
			for range n {
				a := rapid.IntRange(lo, hi).Draw(t, "a")
				switch rapid.IntRange(0, 4).Draw(t, "kind") {
				case 0:
					items = append(items, "*")
				case 1:
					items = append(items, fmt.Sprint(a))
				case 2:
					b := rapid.IntRange(a, hi).Draw(t, "b")
					items = append(items, fmt.Sprintf("%d-%d", a, b))
				case 3:
					items = append(items, fmt.Sprintf("*/%d", rapid.IntRange(1, hi-lo+1).Draw(t, "step")))
				default:
					items = append(items, fmt.Sprintf("%d/%d", a, rapid.IntRange(1, hi-lo+1).Draw(t, "step")))
				}
			}
			return strings.Join(items, ",")
		})
	}
	return rapid.Custom(func(t *rapid.T) string {
		return strings.Join([]string{
			field(0, 59).Draw(t, "minute"), field(0, 23).Draw(t, "hour"),
			rapid.SampledFrom([]string{"*", "*", "1", "1-15", "*/2", "28-31"}).Draw(t, "dom"),
			rapid.SampledFrom([]string{"*", "*", "3", "10", "1-6", "*/3"}).Draw(t, "month"),
			rapid.SampledFrom([]string{"*", "*", "0", "1-5", "SAT,SUN", "7"}).Draw(t, "dow"),
		}, " ")
	})
}

// TestDaylightSavingTable pins the two rules users meet twice a year.
func TestDaylightSavingTable(t *testing.T) {
	berlin, _ := load(t, "Europe/Berlin")
	ny, _ := load(t, "America/New_York")
	utc := func(s string) int64 {
		at, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return at.UnixNano()
	}
	cases := []struct {
		zone        *cron.Zone
		expr, after string
		want        []string
	}{
		// 2027-03-28 02:00 CET becomes 03:00 CEST: 02:30 does not
		// occur, and falls due when the gap ends.
		{berlin, "30 2 * * *", "2027-03-27T12:00:00Z", []string{"2027-03-28T01:00:00Z", "2027-03-29T00:30:00Z"}},
		// Every quarter hour of the skipped hour: one fire.
		{berlin, "*/15 2 * * *", "2027-03-27T23:00:00Z", []string{"2027-03-28T01:00:00Z", "2027-03-29T00:00:00Z"}},
		// 2027-10-31 03:00 CEST becomes 02:00 CET: 02:30 occurs twice
		// and falls due at the first.
		{berlin, "30 2 * * *", "2027-10-30T12:00:00Z", []string{"2027-10-31T00:30:00Z", "2027-11-01T01:30:00Z"}},
		// New York: 2027-03-14 02:00 EST becomes 03:00 EDT;
		// 2027-11-07 02:00 EDT becomes 01:00 EST.
		{ny, "30 1 * * *", "2027-11-06T12:00:00Z", []string{"2027-11-07T05:30:00Z", "2027-11-08T06:30:00Z"}},
		{ny, "0 3 * * *", "2027-03-13T12:00:00Z", []string{"2027-03-14T07:00:00Z", "2027-03-15T07:00:00Z"}},
		{cron.UTC, "0 0 29 2 *", "2027-01-01T00:00:00Z", []string{"2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"}},
		{cron.UTC, "@every 90m", "2027-01-01T00:00:00Z", []string{"2027-01-01T01:30:00Z", "2027-01-01T03:00:00Z"}},
	}
	for _, c := range cases {
		spec, err := cron.Parse(c.expr)
		if err != nil {
			t.Fatal(err)
		}
		at := utc(c.after)
		anchor := at
		var got []string
		for range c.want {
			next, ok := spec.Next(c.zone, anchor, at)
			if !ok {
				t.Fatalf("%s %q: no fire after %s", c.zone, c.expr, time.Unix(0, at).UTC())
			}
			got = append(got, time.Unix(0, next).UTC().Format(time.RFC3339))
			at = next
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s %q after %s: %v, want %v", c.zone, c.expr, c.after, got, c.want)
		}
	}
}

func TestParseRefusals(t *testing.T) {
	for _, expr := range []string{
		"", "* * * *", "* * * * * *", "60 * * * *", "* 24 * * *", "* * 0 * *", "* * 32 * *",
		"* * * 13 *", "* * * * 8", "5-1 * * * *", "*/0 * * * *", "*/61 * * * *", "a * * * *",
		"-1 * * * *", "+1 * * * *", "1,,2 * * * *", "0 0 30 2 *", "0 0 31 4,6,9,11 *",
		"@reboot", "@every", "@every 0s", "@every 500ms", "@every 1500us", "@every 367d",
		"@every 8785h", "@daily extra", "* * * JANUARY *", strings.Repeat("1,", 200) + "1 * * * *",
	} {
		if _, err := cron.Parse(expr); !errors.Is(err, cron.ErrSyntax) {
			t.Errorf("Parse(%q) = %v, want a syntax refusal", expr, err)
		}
	}
	for _, expr := range []string{
		"0 0 30 2 MON", // both day fields restricted: Mondays
		"0 0 29 2 *", "@every 1s", "@every 8784h", "0 0 * * 7", "0 0 * jan-MAR sun", "@EVERY 2m",
	} {
		if _, err := cron.Parse(expr); err != nil {
			t.Errorf("Parse(%q): %v", expr, err)
		}
	}
}

func TestZoneRefusals(t *testing.T) {
	for _, rule := range []string{
		"", "U", "EST", "EST5EDT", "EST5EDT,M3.2.0", "EST5EDT,M13.2.0,M11.1.0", "EST5EDT,M3.6.0,M11.1.0",
		"EST5EDT,M3.2.7,M11.1.0", "EST5EDT,J0,J365", "EST5EDT,366,0", "EST25", "<AB>5", "<+05",
		"EST5EDT,M3.2.0/168,M11.1.0", "EST5:60", "EST5EDT,M3.2.0,M11.1.0x", strings.Repeat("A", 200) + "5",
	} {
		if _, err := cron.ParseZone(rule); !errors.Is(err, cron.ErrZone) {
			t.Errorf("ParseZone(%q) = %v, want a refusal", rule, err)
		}
	}
	for _, rule := range []string{"UTC", "UTC0", "<+0530>-5:30", "EST5EDT,M3.2.0,M11.1.0", "EST5EDT,0/0,J365/25", "<-03>3<-02>,M3.5.0/-2,M10.5.0/-1", "IST-1GMT0,M10.5.0,M3.5.0/1"} {
		if _, err := cron.ParseZone(rule); err != nil {
			t.Errorf("ParseZone(%q): %v", rule, err)
		}
	}
}

// TestDaylightSavingAllYear: a rule whose saving never ends (its end
// change meets the next start) keeps its daylight offset at every
// instant, as package time's reading of the same rule does.
func TestDaylightSavingAllYear(t *testing.T) {
	z, err := cron.ParseZone("EST5EDT,0/0,J365/25")
	if err != nil {
		t.Fatal(err)
	}
	for sec := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC).Unix(); sec < time.Date(2029, 1, 2, 0, 0, 0, 0, time.UTC).Unix(); sec += 1800 {
		if off, dst := z.Offset(sec); off != -4*3600 || !dst {
			t.Fatalf("at %s: %d %v", time.Unix(sec, 0).UTC(), off, dst)
		}
	}
}

// TestTheEndOfTime: fires stop at the end of 2261, without wrapping.
func TestTheEndOfTime(t *testing.T) {
	last := time.Date(2261, 12, 31, 23, 0, 0, 0, time.UTC).UnixNano()
	for _, expr := range []string{"0 * * * *", "@every 8784h", "@yearly"} {
		spec, _ := cron.Parse(expr)
		if next, ok := spec.Next(cron.UTC, last, last); ok {
			t.Errorf("%q after %s: %s, want none", expr, time.Unix(0, last).UTC(), time.Unix(0, next).UTC())
		}
	}
	spec, _ := cron.Parse("59 23 31 12 *")
	if next, ok := spec.Next(cron.UTC, 0, last-1); !ok || time.Unix(0, next).UTC().Format(time.RFC3339) != "2261-12-31T23:59:00Z" {
		t.Errorf("the last minute: %d %v", next, ok)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range specs {
		f.Add(s, "CET-1CEST,M3.5.0,M10.5.0/3", int64(1800000000e9))
	}
	f.Add("@every 1h", "UTC", int64(-1))
	f.Fuzz(func(t *testing.T, expr, rule string, after int64) {
		spec, err := cron.Parse(expr)
		if err != nil {
			return
		}
		z, err := cron.ParseZone(rule)
		if err != nil {
			return
		}
		next, ok := spec.Next(z, 0, after)
		if ok && next <= after {
			t.Fatalf("Next(%d) = %d", after, next)
		}
		if ok {
			if again, ok2 := spec.Next(z, 0, next-1); !ok2 || again != next {
				t.Fatalf("Next(%d) = %d but Next(%d) = %d", after, next, next-1, again)
			}
		}
	})
}

// TestCalendarArithmetic: the zone's integer calendar is package time's,
// from 1900 to 2262.
func TestCalendarArithmetic(t *testing.T) {
	for d := time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC); d.Year() < 2262; d = d.AddDate(0, 0, 3) {
		if got := cron.ExportDaysFromCivil(d.Year(), int(d.Month()), d.Day()); got != d.Unix()/86400 {
			t.Fatalf("%s: day %d, want %d", d, got, d.Unix()/86400)
		}
		for _, sec := range []int64{d.Unix(), d.Unix() + 86399} {
			if got := cron.ExportYearOf(sec); got != d.Year() {
				t.Fatalf("%s: year %d", time.Unix(sec, 0).UTC(), got)
			}
		}
		if got := cron.ExportWeekday(d.Unix() / 86400); got != int(d.Weekday()) {
			t.Fatalf("%s: weekday %d, want %d", d, got, d.Weekday())
		}
	}
}

func TestDocs(t *testing.T) { testutil.RequireDocs(t, ".") }
