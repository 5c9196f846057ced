package conformance

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// refRE is a reference to a value a step kept: ${name.field.field}.
var refRE = regexp.MustCompile(`\$\{([A-Za-z0-9_.-]+)\}`)

// substitute returns v with every reference replaced by the value it
// names: a string that is one whole reference becomes the value itself
// (a number stays a number), a reference inside a longer string is
// replaced by the value's text.
func substitute(v any, lookup func(string) (any, error)) (any, error) {
	switch x := v.(type) {
	case string:
		if m := refRE.FindStringSubmatch(x); m != nil && m[0] == x {
			return lookup(m[1])
		}
		var err error
		s := refRE.ReplaceAllStringFunc(x, func(ref string) string {
			val, e := lookup(refRE.FindStringSubmatch(ref)[1])
			if e != nil {
				err = e
				return ref
			}
			return text(val)
		})
		return s, err
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			s, err := substitute(e, lookup)
			if err != nil {
				return nil, err
			}
			out[k] = s
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			s, err := substitute(e, lookup)
			if err != nil {
				return nil, err
			}
			out[i] = s
		}
		return out, nil
	}
	return v, nil
}

// text is a value as it reads inside a string.
func text(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return strconv.FormatInt(int64(x), 10)
		}
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// field returns the value at path (dot-separated keys, or indexes of
// arrays) in v.
func field(v any, path []string) (any, error) {
	for i, p := range path {
		switch x := v.(type) {
		case map[string]any:
			e, ok := x[p]
			if !ok {
				return nil, fmt.Errorf("no field %q", strings.Join(path[:i+1], "."))
			}
			v = e
		case []any:
			n, err := strconv.Atoi(p)
			if err != nil || n < 0 || n >= len(x) {
				return nil, fmt.Errorf("no element %q", strings.Join(path[:i+1], "."))
			}
			v = x[n]
		default:
			return nil, fmt.Errorf("%q is not an object", strings.Join(path[:i], "."))
		}
	}
	return v, nil
}

// match reports how value differs from pattern, or nil when it matches:
//   - an object matches an object holding at least its fields, each
//     matching (a field whose pattern is null matches an absent field or
//     null);
//   - an array matches an array in which each of its elements matches
//     some element (containment, in any order);
//   - strings, numbers and booleans match equal values;
//   - an object with one operator field compares: {"$in":[...]} one of,
//     {"$gte":n}, {"$gt":n}, {"$lte":n}, {"$lt":n} numbers,
//     {"$absent":true} a field that is absent or null,
//     {"$len":n} an array of n elements.
func match(pattern, value any) error { return matchAt("", pattern, value) }

func matchAt(at string, pattern, value any) error {
	where := at
	if where == "" {
		where = "the value"
	}
	switch p := pattern.(type) {
	case nil:
		if value != nil {
			return fmt.Errorf("%s: have %s, want null or absent", where, text(value))
		}
		return nil
	case map[string]any:
		if op, ok := operator(p); ok {
			return matchOp(where, op, p[op], value)
		}
		v, ok := value.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: have %s, want an object", where, text(value))
		}
		keys := make([]string, 0, len(p))
		for k := range p {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			sub := k
			if at != "" {
				sub = at + "." + k
			}
			if err := matchAt(sub, p[k], v[k]); err != nil {
				return err
			}
		}
		return nil
	case []any:
		v, ok := value.([]any)
		if !ok {
			return fmt.Errorf("%s: have %s, want an array", where, text(value))
		}
		for _, pe := range p {
			if !slices.ContainsFunc(v, func(ve any) bool { return matchAt(at, pe, ve) == nil }) {
				return fmt.Errorf("%s: have %s, want an element matching %s", where, text(value), text(pe))
			}
		}
		return nil
	case float64:
		if v, ok := value.(float64); !ok || v != p {
			return fmt.Errorf("%s: have %s, want %s", where, text(value), text(p))
		}
		return nil
	default:
		if pattern != value {
			return fmt.Errorf("%s: have %s, want %s", where, text(value), text(pattern))
		}
		return nil
	}
}

var operators = []string{"$in", "$gte", "$gt", "$lte", "$lt", "$absent", "$len"}

func operator(p map[string]any) (string, bool) {
	if len(p) != 1 {
		return "", false
	}
	for k := range p {
		if slices.Contains(operators, k) {
			return k, true
		}
	}
	return "", false
}

func matchOp(where, op string, arg, value any) error {
	switch op {
	case "$in":
		alts, _ := arg.([]any)
		for _, a := range alts {
			if matchAt("", a, value) == nil {
				return nil
			}
		}
		return fmt.Errorf("%s: have %s, want one of %s", where, text(value), text(arg))
	case "$absent":
		if value != nil {
			return fmt.Errorf("%s: have %s, want it absent", where, text(value))
		}
		return nil
	case "$len":
		v, ok := value.([]any)
		if n, _ := arg.(float64); !ok || float64(len(v)) != n {
			return fmt.Errorf("%s: have %s, want %s elements", where, text(value), text(arg))
		}
		return nil
	}
	n, ok1 := arg.(float64)
	v, ok2 := value.(float64)
	if !ok1 || !ok2 {
		return fmt.Errorf("%s: have %s, want a number %s %s", where, text(value), op, text(arg))
	}
	var ok bool
	switch op {
	case "$gte":
		ok = v >= n
	case "$gt":
		ok = v > n
	case "$lte":
		ok = v <= n
	case "$lt":
		ok = v < n
	}
	if !ok {
		return fmt.Errorf("%s: have %s, want %s %s", where, text(value), op, text(arg))
	}
	return nil
}

// instant reads a time: a number is Unix milliseconds (at_ms), a string
// RFC 3339 (a decision's times).
func instant(v any) (time.Time, error) {
	switch x := v.(type) {
	case float64:
		return time.UnixMilli(int64(x)), nil
	case string:
		return time.Parse(time.RFC3339Nano, x)
	}
	return time.Time{}, fmt.Errorf("%s is not a time (Unix ms or RFC 3339)", text(v))
}

// token is a fencing token read from its text, <job>/<lease id>/<generation>.
type token struct {
	job      string
	leaseSeq uint64 // the <seq> of the lease id L<seq>-<tag>
	gen      uint64
}

func parseToken(s string) (token, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 {
		return token{}, fmt.Errorf("fencing token %q: want <job>/<lease id>/<generation>", s)
	}
	gen, err := strconv.ParseUint(parts[2], 10, 64)
	if err != nil {
		return token{}, fmt.Errorf("fencing token %q: generation: %w", s, err)
	}
	id, _, _ := strings.Cut(strings.TrimPrefix(parts[1], "L"), "-")
	seq, err := strconv.ParseUint(id, 10, 64)
	if err != nil || !strings.HasPrefix(parts[1], "L") {
		return token{}, fmt.Errorf("fencing token %q: lease id: want L<seq>-<tag>", s)
	}
	return token{job: parts[0], leaseSeq: seq, gen: gen}, nil
}
