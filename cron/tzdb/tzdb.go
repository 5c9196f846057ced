// Package tzdb turns an IANA time zone name (Europe/Berlin) into the
// POSIX TZ rule a schedule carries (CET-1CEST,M3.5.0,M10.5.0/3), read
// from the footer of the zone's TZif file in this host's time zone
// database. It is where a dispatcher resolves a zone, once, when it sets
// a schedule; the fold never reads a file (package cron).
//
// A rule describes a zone as its rules stand, and a zone whose database
// lists future changes no yearly rule describes (Asia/Gaza and
// Africa/Casablanca, whose clocks change around each Ramadan) keeps only
// the rule of its footer: for those, schedules follow standard time
// through Ramadan. Set such a schedule in UTC or in a fixed offset when
// that matters.
//
// The database is looked for, in order: the directory or zip file that
// $ZONEINFO names; /usr/share/zoneinfo, /usr/share/lib/zoneinfo and
// /usr/lib/locale/TZ; and the zoneinfo.zip of the Go installation (on a
// host without a database, a Go toolchain still has one).
package tzdb

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/maknow/tenure/cron"
)

// ErrUnknown is returned for a name no database holds.
var ErrUnknown = errors.New("tzdb: unknown time zone")

// maxFile bounds a TZif file's size (the largest real one is under 4 KiB).
const maxFile = 1 << 20

// Rule is the POSIX TZ rule of zone name.
func Rule(name string) (string, error) {
	if err := checkName(name); err != nil {
		return "", err
	}
	data, err := load(name)
	if err != nil {
		return "", err
	}
	return Footer(data)
}

// Resolve returns the zone name stands for: an IANA name from the
// database, else name read as a POSIX TZ rule (EST5EDT is both, with one
// meaning). It returns the rule it resolved to.
func Resolve(name string) (*cron.Zone, string, error) {
	rule, err := Rule(name)
	if err == nil {
		z, perr := cron.ParseZone(rule)
		if perr != nil {
			return nil, "", fmt.Errorf("tzdb: zone %q: its rule %q: %w", name, rule, perr)
		}
		return z, rule, nil
	}
	if z, perr := cron.ParseZone(name); perr == nil {
		return z, name, nil
	}
	return nil, "", err
}

func checkName(name string) error {
	if name == "" || len(name) > 64 || strings.HasPrefix(name, "/") || strings.Contains(name, "..") {
		return fmt.Errorf("%w %q", ErrUnknown, name)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("/_+-", c)) {
			return fmt.Errorf("%w %q", ErrUnknown, name)
		}
	}
	return nil
}

// sources are the databases to look in, in order.
func sources() []string {
	var s []string
	if z := os.Getenv("ZONEINFO"); z != "" {
		s = append(s, z)
	}
	s = append(s, "/usr/share/zoneinfo", "/usr/share/lib/zoneinfo", "/usr/lib/locale/TZ")
	//lint:ignore SA1019 the toolchain's zoneinfo.zip is the last resort, as package time's own
	return append(s, filepath.Join(runtime.GOROOT(), "lib", "time", "zoneinfo.zip"))
}

func load(name string) ([]byte, error) {
	for _, src := range sources() {
		var data []byte
		var err error
		if strings.HasSuffix(src, ".zip") {
			data, err = fromZip(src, name)
		} else {
			data, err = fromFile(filepath.Join(src, filepath.FromSlash(name)))
		}
		if err == nil {
			return data, nil
		}
	}
	return nil, fmt.Errorf("%w %q (looked in $ZONEINFO, /usr/share/zoneinfo and the Go installation's zoneinfo.zip)", ErrUnknown, name)
}

func fromFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fs.ErrNotExist
	}
	return io.ReadAll(io.LimitReader(f, maxFile))
}

func fromZip(path, name string) ([]byte, error) {
	r, err := zip.OpenReader(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	f, err := r.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxFile))
}

// Footer is the POSIX TZ rule in the footer of TZif data (RFC 8536,
// version 2 or later).
func Footer(data []byte) (string, error) {
	bad := func(why string) (string, error) { return "", errors.New("tzdb: not a usable TZif file: " + why) }
	const header = 44
	if len(data) < header || string(data[:4]) != "TZif" {
		return bad("no TZif header")
	}
	if data[4] < '2' {
		return bad("version 1 has no footer rule")
	}
	size := func(h []byte, v1 bool) (int, bool) {
		c := func(i int) int { return int(binary.BigEndian.Uint32(h[20+4*i:])) }
		isut, isstd, leap, timecnt, typecnt, charcnt := c(0), c(1), c(2), c(3), c(4), c(5)
		if isut > 1<<16 || isstd > 1<<16 || leap > 1<<16 || timecnt > 1<<16 || typecnt > 256 || charcnt > 1<<16 {
			return 0, false
		}
		tsz := 8
		if v1 {
			tsz = 4
		}
		return timecnt*tsz + timecnt + typecnt*6 + charcnt + leap*(tsz+4) + isstd + isut, true
	}
	n1, ok := size(data, true)
	if !ok || header+n1+header > len(data) {
		return bad("truncated")
	}
	h2 := data[header+n1:]
	if string(h2[:4]) != "TZif" {
		return bad("no second header")
	}
	n2, ok := size(h2, false)
	if !ok || header+n2 > len(h2) {
		return bad("truncated")
	}
	foot := h2[header+n2:]
	if len(foot) < 2 || foot[0] != '\n' {
		return bad("no footer")
	}
	end := bytes.IndexByte(foot[1:], '\n')
	if end < 0 {
		return bad("unterminated footer")
	}
	rule := string(foot[1 : 1+end])
	if rule == "" {
		return bad("an empty footer (the zone has no rule for times after its table)")
	}
	return rule, nil
}
