package events

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// Headers set on every decision message, so that readers can follow the
// chain without decoding bodies.
const (
	HeaderCause = "Tenure-Cause" // input sequence that caused the decision
	HeaderIndex = "Tenure-N"     // "n/of": index among that input's decisions and their count
)

// DecisionMsgID is the deterministic Nats-Msg-Id of decision n of input cause:
// a retried append of the same decision is deduplicated by the stream.
func DecisionMsgID(cause uint64, n uint16) string {
	b := make([]byte, 0, 24)
	b = append(b, "d-"...)
	b = strconv.AppendUint(b, cause, 10)
	b = append(b, '-')
	b = strconv.AppendUint(b, uint64(n), 10)
	return string(b)
}

// AppendTime appends t (Unix ns) as time.RFC3339Nano in UTC would
// ("2026-01-02T15:04:05.123Z", trailing zeros of the fraction trimmed), for
// every time from 1970 on (int64 nanoseconds end in 2262), without time.Format's cost (it is on the hot path:
// every decision carries several times). Earlier times fall back to
// time.AppendFormat.
func AppendTime(dst []byte, t int64) []byte {
	if t < 0 {
		return time.Unix(0, t).UTC().AppendFormat(dst, time.RFC3339Nano)
	}
	secs, nanos := t/1e9, t%1e9
	days, rem := secs/86400, secs%86400
	// Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
	z := days + 719468
	era := z / 146097
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	y := yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d := doy - (153*mp+2)/5 + 1
	m := mp + 3
	if m > 12 {
		m -= 12
	}
	if m <= 2 {
		y++
	}
	var b [30]byte
	put := func(i int, v int64, n int) {
		for k := i + n - 1; k >= i; k-- {
			b[k] = byte('0' + v%10)
			v /= 10
		}
	}
	put(0, y, 4)
	b[4] = '-'
	put(5, m, 2)
	b[7] = '-'
	put(8, d, 2)
	b[10] = 'T'
	put(11, rem/3600, 2)
	b[13] = ':'
	put(14, rem/60%60, 2)
	b[16] = ':'
	put(17, rem%60, 2)
	n := 19
	if nanos != 0 {
		b[19] = '.'
		put(20, nanos, 9)
		n = 29
		for b[n-1] == '0' {
			n--
		}
	}
	b[n] = 'Z'
	return append(dst, b[:n+1]...)
}

// FormatTime renders t (Unix ns) as AppendTime does; "" for 0.
func FormatTime(t int64) string {
	if t == 0 {
		return ""
	}
	return string(AppendTime(nil, t))
}

// AppendDecision appends the canonical JSON encoding of d: fields in a fixed
// order, zero times and empty strings omitted. The same decision always
// encodes to the same bytes; the auditor compares these bytes.
func AppendDecision(b []byte, d *Decision) []byte {
	b = append(b, `{"v":1,"cause":`...)
	b = strconv.AppendUint(b, d.Cause, 10)
	b = append(b, `,"n":`...)
	b = strconv.AppendUint(b, uint64(d.N), 10)
	b = append(b, `,"of":`...)
	b = strconv.AppendUint(b, uint64(d.Of), 10)
	b = append(b, `,"at":"`...)
	b = AppendTime(b, d.At)
	b = append(b, `","kind":"`...)
	b = append(b, d.Kind.String()...)
	b = append(b, `","accepted":`...)
	b = strconv.AppendBool(b, d.Kind.Accepted())
	b = append(b, `,"reason":"`...)
	b = append(b, d.Reason...)
	b = append(b, '"')
	if d.Detail != "" {
		b = append(b, `,"detail":`...)
		b = appendString(b, d.Detail)
	}
	b = append(b, `,"input":{"role":"`...)
	b = append(b, d.Role.String()...)
	b = append(b, `","actor":"`...)
	b = append(b, d.Actor...)
	b = append(b, `","verb":"`...)
	b = append(b, d.Verb.String()...)
	b = append(b, `"},"addressee":"`...)
	b = append(b, d.Addressee...)
	b = append(b, `","job":`...)
	b = AppendJob(b, &d.Job)
	if d.Policy != nil {
		b = append(b, `,"policy":`...)
		b = AppendPolicy(b, d.Policy)
	}
	return append(b, '}')
}

// AppendJob appends the canonical JSON encoding of a job projection.
func AppendJob(b []byte, j *Job) []byte {
	b = append(b, `{"id":"`...)
	b = append(b, j.ID...)
	b = append(b, '"')
	if j.Generation == 0 {
		return append(b, `,"state":"NONE"}`...)
	}
	b = append(b, `,"lease_id":"`...)
	b = append(b, j.LeaseID...)
	b = append(b, `","generation":`...)
	b = strconv.AppendUint(b, j.Generation, 10)
	b = append(b, `,"holder":"`...)
	b = append(b, j.Holder...)
	b = append(b, `","state":"`...)
	b = append(b, j.State.String()...)
	b = append(b, `","ack_state":"`...)
	b = append(b, j.AckState.String()...)
	b = append(b, '"')
	if j.Result != OutcomeNone {
		b = append(b, `,"result":"`...)
		b = append(b, j.Result.String()...)
		b = append(b, '"')
	}
	b = append(b, `,"lease_ms":`...)
	b = strconv.AppendInt(b, j.Duration/1e6, 10)
	b = appendTimeField(b, "issued_at", j.IssuedAt)
	b = appendTimeField(b, "expires_at", j.ExpiresAt)
	b = appendTimeField(b, "ack_deadline", j.AckDeadline)
	b = appendTimeField(b, "acked_at", j.AckedAt)
	b = append(b, `,"renew_seq":`...)
	b = strconv.AppendUint(b, j.RenewSeq, 10)
	b = appendTimeField(b, "renew_at", j.RenewAt)
	b = append(b, `,"progress_seq":`...)
	b = strconv.AppendUint(b, j.ProgressSeq, 10)
	b = append(b, `,"progress_value":`...)
	b = strconv.AppendInt(b, j.ProgressValue, 10)
	b = appendTimeField(b, "progress_at", j.ProgressAt)
	b = append(b, `,"cancel_requested":`...)
	b = strconv.AppendBool(b, j.CancelReq)
	b = append(b, `,"cancel_acked":`...)
	b = strconv.AppendBool(b, j.CancelAck)
	b = appendTimeField(b, "cancel_at", j.CancelAt)
	b = appendTimeField(b, "cancel_by", j.CancelBy)
	b = appendTimeField(b, "ended_at", j.EndedAt)
	b = append(b, `,"lease_expired":`...)
	b = strconv.AppendBool(b, j.LeaseExpired)
	b = append(b, `,"conflict":`...)
	b = strconv.AppendBool(b, j.Conflict)
	if j.ConflictWith != "" {
		b = append(b, `,"conflict_with":"`...)
		b = append(b, j.ConflictWith...)
		b = append(b, '"')
	}
	b = append(b, `,"stale":`...)
	b = strconv.AppendUint(b, uint64(j.Stale), 10)
	b = append(b, `,"late":`...)
	b = strconv.AppendUint(b, uint64(j.Late), 10)
	b = append(b, `,"late_progress":`...)
	b = strconv.AppendUint(b, uint64(j.LateProgress), 10)
	b = append(b, `,"duplicates":`...)
	b = strconv.AppendUint(b, uint64(j.Duplicates), 10)
	b = append(b, `,"conflicts":`...)
	b = strconv.AppendUint(b, uint64(j.Conflicts), 10)
	return append(b, '}')
}

// AppendPolicy appends the canonical JSON encoding of a policy (durations in ms).
func AppendPolicy(b []byte, p *Policy) []byte {
	field := func(b []byte, name string, ns int64) []byte {
		b = append(b, '"')
		b = append(b, name...)
		b = append(b, `":`...)
		return strconv.AppendInt(b, ns/1e6, 10)
	}
	b = append(b, '{')
	b = field(b, "min_lease_ms", p.MinLease)
	b = append(b, ',')
	b = field(b, "max_lease_ms", p.MaxLease)
	b = append(b, ',')
	b = field(b, "default_lease_ms", p.DefaultLease)
	b = append(b, ',')
	b = field(b, "ack_timeout_ms", p.AckTimeout)
	b = append(b, ',')
	b = field(b, "cancel_timeout_ms", p.CancelTimeout)
	b = append(b, ',')
	b = field(b, "max_lifetime_ms", p.MaxLifetime)
	b = append(b, `,"max_generations":`...)
	b = strconv.AppendUint(b, p.MaxGenerations, 10)
	return append(b, '}')
}

func appendTimeField(b []byte, name string, t int64) []byte {
	if t == 0 {
		return b
	}
	b = append(b, `,"`...)
	b = append(b, name...)
	b = append(b, `":"`...)
	b = AppendTime(b, t)
	return append(b, '"')
}

// appendString appends s as a JSON string. Decoded inputs hold no control
// characters, but details are escaped anyway so any string stays valid JSON.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c == 0x7f:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// wire forms for DecodeDecision.
type wireDecision struct {
	V         int         `json:"v"`
	Cause     uint64      `json:"cause"`
	N         uint16      `json:"n"`
	Of        uint16      `json:"of"`
	At        string      `json:"at"`
	Kind      string      `json:"kind"`
	Accepted  bool        `json:"accepted"`
	Reason    string      `json:"reason"`
	Detail    string      `json:"detail"`
	Input     wireIdent   `json:"input"`
	Addressee string      `json:"addressee"`
	Job       wireJob     `json:"job"`
	Policy    *wirePolicy `json:"policy"`
}

type wireIdent struct {
	Role  string `json:"role"`
	Actor string `json:"actor"`
	Verb  string `json:"verb"`
}

type wireJob struct {
	ID            string `json:"id"`
	LeaseID       string `json:"lease_id"`
	Generation    uint64 `json:"generation"`
	Holder        string `json:"holder"`
	State         string `json:"state"`
	AckState      string `json:"ack_state"`
	Result        string `json:"result"`
	LeaseMS       int64  `json:"lease_ms"`
	IssuedAt      string `json:"issued_at"`
	ExpiresAt     string `json:"expires_at"`
	AckDeadline   string `json:"ack_deadline"`
	AckedAt       string `json:"acked_at"`
	RenewSeq      uint64 `json:"renew_seq"`
	RenewAt       string `json:"renew_at"`
	ProgressSeq   uint64 `json:"progress_seq"`
	ProgressValue int64  `json:"progress_value"`
	ProgressAt    string `json:"progress_at"`
	CancelReq     bool   `json:"cancel_requested"`
	CancelAck     bool   `json:"cancel_acked"`
	CancelAt      string `json:"cancel_at"`
	CancelBy      string `json:"cancel_by"`
	EndedAt       string `json:"ended_at"`
	LeaseExpired  bool   `json:"lease_expired"`
	Conflict      bool   `json:"conflict"`
	ConflictWith  string `json:"conflict_with"`
	Stale         uint32 `json:"stale"`
	Late          uint32 `json:"late"`
	LateProgress  uint32 `json:"late_progress"`
	Duplicates    uint32 `json:"duplicates"`
	Conflicts     uint32 `json:"conflicts"`
}

type wirePolicy struct {
	MinLease       int64  `json:"min_lease_ms"`
	MaxLease       int64  `json:"max_lease_ms"`
	DefaultLease   int64  `json:"default_lease_ms"`
	AckTimeout     int64  `json:"ack_timeout_ms"`
	CancelTimeout  int64  `json:"cancel_timeout_ms"`
	MaxLifetime    int64  `json:"max_lifetime_ms"`
	MaxGenerations uint64 `json:"max_generations"`
}

// DecodeDecision parses a decision written by AppendDecision. Decisions come
// from the coordinator, not from untrusted actors, so this uses encoding/json;
// the auditor verifies decisions by comparing bytes, not through this.
func DecodeDecision(data []byte) (Decision, error) {
	var w wireDecision
	if err := json.Unmarshal(data, &w); err != nil {
		return Decision{}, fmt.Errorf("events: decode decision: %w", err)
	}
	if w.V != Version {
		return Decision{}, fmt.Errorf("events: decode decision: version %d", w.V)
	}
	var d Decision
	var ok bool
	var err error
	bad := func(field, v string) error { return fmt.Errorf("events: decode decision: bad %s %q", field, v) }
	d.Cause, d.N, d.Of, d.Detail, d.Addressee = w.Cause, w.N, w.Of, w.Detail, w.Addressee
	d.Reason = Reason(w.Reason)
	if d.At, err = parseTime(w.At); err != nil {
		return d, err
	}
	if d.Kind, ok = ParseKind(w.Kind); !ok {
		return d, bad("kind", w.Kind)
	}
	if d.Role, ok = ParseRole(w.Input.Role); !ok && w.Input.Role != "" {
		return d, bad("role", w.Input.Role)
	}
	if d.Verb, ok = ParseVerb(w.Input.Verb); !ok && w.Input.Verb != "" {
		return d, bad("verb", w.Input.Verb)
	}
	d.Actor = w.Input.Actor
	wj := &w.Job
	j := &d.Job
	j.ID, j.LeaseID, j.Generation, j.Holder = wj.ID, wj.LeaseID, wj.Generation, wj.Holder
	if j.State, ok = ParseState(wj.State); !ok {
		return d, bad("state", wj.State)
	}
	if wj.AckState != "" {
		if j.AckState, ok = ParseAckState(wj.AckState); !ok {
			return d, bad("ack_state", wj.AckState)
		}
	}
	if wj.Result != "" {
		if j.Result, ok = ParseOutcome(wj.Result); !ok {
			return d, bad("result", wj.Result)
		}
	}
	j.Duration = wj.LeaseMS * 1e6
	j.RenewSeq, j.ProgressSeq, j.ProgressValue = wj.RenewSeq, wj.ProgressSeq, wj.ProgressValue
	j.CancelReq, j.CancelAck, j.LeaseExpired, j.Conflict, j.ConflictWith = wj.CancelReq, wj.CancelAck, wj.LeaseExpired, wj.Conflict, wj.ConflictWith
	j.Stale, j.Late, j.LateProgress, j.Duplicates, j.Conflicts = wj.Stale, wj.Late, wj.LateProgress, wj.Duplicates, wj.Conflicts
	for _, f := range []struct {
		dst *int64
		src string
	}{
		{&j.IssuedAt, wj.IssuedAt}, {&j.ExpiresAt, wj.ExpiresAt}, {&j.AckDeadline, wj.AckDeadline},
		{&j.AckedAt, wj.AckedAt}, {&j.RenewAt, wj.RenewAt}, {&j.ProgressAt, wj.ProgressAt},
		{&j.CancelAt, wj.CancelAt}, {&j.CancelBy, wj.CancelBy}, {&j.EndedAt, wj.EndedAt},
	} {
		if *f.dst, err = parseTime(f.src); err != nil {
			return d, err
		}
	}
	if w.Policy != nil {
		d.Policy = &Policy{
			MinLease: w.Policy.MinLease * 1e6, MaxLease: w.Policy.MaxLease * 1e6,
			DefaultLease: w.Policy.DefaultLease * 1e6, AckTimeout: w.Policy.AckTimeout * 1e6,
			CancelTimeout: w.Policy.CancelTimeout * 1e6, MaxLifetime: w.Policy.MaxLifetime * 1e6,
			MaxGenerations: w.Policy.MaxGenerations,
		}
	}
	return d, nil
}

func parseTime(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, fmt.Errorf("events: decode decision: %w", err)
	}
	return t.UnixNano(), nil
}
