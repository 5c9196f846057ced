package events

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"
)

// Headers set on every decision message, so that readers can follow the
// chain without decoding bodies.
const (
	HeaderCause = "Tenure-Cause" // input sequence that caused the decision
	HeaderIndex = "Tenure-N"     // "n/of": index among that input's decisions and their count
)

// HeaderSourceSeq is set on the decisions of an input that its worker
// stored in its intake stream (quotas, PROTOCOL.md §4.2) and that are
// addressed to that worker: the input's sequence in the intake stream,
// which is what the worker's PubAck named (Tenure-Cause names the input
// stream's). A worker matches its verdicts by it. It is not part of the
// decision's body or chain value; the audit checks it against the input's
// Nats-Stream-Source header.
const HeaderSourceSeq = "Tenure-Source-Seq"

// DecisionMsgID is the deterministic Nats-Msg-Id of decision n of input cause:
// a retried append of the same decision is deduplicated by the stream.
func DecisionMsgID(cause uint64, n uint32) string {
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
	if d.Revision != 0 {
		b = append(b, `,"rules":{"revision":`...)
		b = strconv.AppendUint(b, uint64(d.Revision), 10)
		b = append(b, '}')
	}
	if c := d.Checkpoint; c != nil {
		b = append(b, `,"checkpoint":{"input_seq":`...)
		b = strconv.AppendUint(b, c.InputSeq, 10)
		b = append(b, `,"state_hash":"`...)
		b = hex.AppendEncode(b, c.StateHash[:])
		b = append(b, `"}`...)
	}
	if c := d.Capacity; c != nil { // revision 4 on
		b = append(b, `,"capacity":{"queue":`...)
		b = appendString(b, c.Queue)
		b = append(b, `,"slots":`...)
		b = strconv.AppendUint(b, c.Slots, 10)
		b = appendTimeField(b, "until", c.Until) // omitted when 0: no standing announcement (slots 0)
		b = append(b, '}')
	}
	if s := d.Standing; s != nil { // revision 5 on
		b = append(b, `,"standing":{"queue":`...)
		b = appendString(b, s.Queue)
		b = append(b, `,"window":`...)
		b = strconv.AppendUint(b, s.Window, 10)
		b = append(b, `,"strikes":`...)
		b = strconv.AppendUint(b, s.Strikes, 10)
		b = appendTimeField(b, "held_until", s.HeldUntil) // omitted when 0: not held
		b = append(b, '}')
	}
	if d.DuplicateOf != "" { // revision 8 on
		b = append(b, `,"duplicate_of":`...)
		b = appendString(b, d.DuplicateOf)
	}
	if l := d.Limit; l != nil { // revision 9 on
		b = append(b, `,"limit":{"queue":`...)
		b = appendString(b, l.Queue)
		if l.ConcurrencyKey != "" {
			b = append(b, `,"concurrency_key":`...)
			b = appendString(b, l.ConcurrencyKey)
		}
		if l.HasMaxActive {
			b = append(b, `,"max_active":`...)
			b = strconv.AppendUint(b, l.MaxActive, 10)
		}
		if l.Rate != 0 {
			b = append(b, `,"rate":`...)
			b = strconv.AppendUint(b, l.Rate, 10)
			b = append(b, `,"period_ms":`...)
			b = strconv.AppendInt(b, l.PeriodMS, 10)
		}
		b = append(b, '}')
	}
	if sc := d.Schedule; sc != nil { // revision 10 on
		b = appendSchedule(b, sc)
	}
	return append(b, '}')
}

// appendSchedule appends a decision's "schedule" object (revision 10):
// id, then cron, tz, zone, queue, actor, missed (only "once"), paused (only
// true) of a definition (a schedule_set's), next, due, and a
// schedule_missed's missed_from, missed_to, missed_count; each but id
// only when set.
func appendSchedule(b []byte, sc *Schedule) []byte {
	b = append(b, `,"schedule":{"id":`...)
	b = appendString(b, sc.ID)
	if sc.Cron != "" {
		b = append(b, `,"cron":`...)
		b = appendString(b, sc.Cron)
		if sc.TZ != "" {
			b = append(b, `,"tz":`...)
			b = appendString(b, sc.TZ)
		}
		if sc.Zone != "" {
			b = append(b, `,"zone":`...)
			b = appendString(b, sc.Zone)
		}
		b = append(b, `,"queue":`...)
		b = appendString(b, sc.Queue)
		b = append(b, `,"actor":`...)
		b = appendString(b, sc.Actor)
		if sc.Missed != MissedSkip {
			b = append(b, `,"missed":`...)
			b = appendString(b, sc.Missed.String())
		}
		if sc.Paused {
			b = append(b, `,"paused":true`...)
		}
		b = appendTimeField(b, "anchor", sc.Anchor)
		b = append(b, `,"template":`...)
		b = AppendScheduleTemplate(b, sc.Template)
	}
	b = appendTimeField(b, "next", sc.Next)
	b = appendTimeField(b, "due", sc.Due)
	if sc.MissedCount != 0 {
		b = append(b, `,"missed_from":"`...)
		b = append(AppendTime(b, sc.MissedFrom), `","missed_to":"`...)
		b = append(AppendTime(b, sc.MissedTo), `","missed_count":`...)
		b = strconv.AppendUint(b, sc.MissedCount, 10)
	}
	return append(b, '}')
}

// AppendScheduleTemplate appends the canonical JSON of a schedule's
// template (a definition's "template" object): the fields given, in a
// submit's order; {} for nil.
func AppendScheduleTemplate(b []byte, t *ScheduleTemplate) []byte {
	b = append(b, '{')
	n := len(b)
	num := func(name string, v int64) {
		if v != 0 {
			if len(b) > n {
				b = append(b, ',')
			}
			b = append(b, '"')
			b = append(b, name...)
			b = append(b, `":`...)
			b = strconv.AppendInt(b, v, 10)
		}
	}
	str := func(name string, v string, given bool) {
		if given {
			if len(b) > n {
				b = append(b, ',')
			}
			b = append(b, '"')
			b = append(b, name...)
			b = append(b, `":`...)
			b = appendString(b, v)
		}
	}
	if t != nil {
		num("priority", t.Priority)
		num("max_attempts", int64(min(t.MaxAttempts, 1<<62)))
		num("backoff_ms", t.BackoffMS)
		num("backoff_max_ms", t.BackoffMax)
		num("lease_ms", t.LeaseMS)
		num("ack_timeout_ms", t.AckTimeoutMS)
		str("payload", t.Payload, t.HasPayload)
		str("concurrency_key", t.ConcurrencyKey, t.ConcurrencyKey != "")
		str("unique_key", t.UniqueKey, t.UniqueKey != "")
	}
	return append(b, '}')
}

// AppendJob appends the canonical JSON encoding of a job projection. A job
// that never had a lease is {"id":…,"state":"NONE"}, unless it is a queue
// job (revision 4 on): that one is always the full object, followed by its
// queue fields (PROTOCOL.md §22.6). The encoding of a job outside any
// queue is that of revision 3, byte for byte.
func AppendJob(b []byte, j *Job) []byte {
	b = append(b, `{"id":"`...)
	b = append(b, j.ID...)
	b = append(b, '"')
	if j.Generation == 0 && j.Queue == "" {
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
	if j.Queue != "" {
		b = appendQueueFields(b, j)
	}
	if j.Withheld { // revision 5 on: lease_id "" and no payload, for need to know
		b = append(b, `,"withheld":true`...)
	}
	return append(b, '}')
}

// appendQueueFields appends the queue fields of a queue job's projection,
// in the order of PROTOCOL.md §22.6 (durations in ms, Job holds ns).
func appendQueueFields(b []byte, j *Job) []byte {
	b = append(b, `,"queue":`...)
	b = appendString(b, j.Queue)
	b = append(b, `,"submitter":`...)
	b = appendString(b, j.Submitter)
	b = append(b, `,"priority":`...)
	b = strconv.AppendInt(b, j.Priority, 10)
	b = append(b, `,"turn":`...)
	b = strconv.AppendUint(b, j.Turn, 10)
	b = append(b, `,"attempt":`...)
	b = strconv.AppendUint(b, j.Attempt, 10)
	b = append(b, `,"max_attempts":`...)
	b = strconv.AppendUint(b, j.MaxAttempts, 10)
	b = append(b, `,"backoff_ms":`...)
	b = strconv.AppendInt(b, j.Backoff/1e6, 10)
	b = append(b, `,"backoff_max_ms":`...)
	b = strconv.AppendInt(b, j.BackoffMax/1e6, 10)
	if j.AttemptLease != 0 {
		b = append(b, `,"attempt_lease_ms":`...)
		b = strconv.AppendInt(b, j.AttemptLease/1e6, 10)
	}
	if j.AttemptAck != 0 {
		b = append(b, `,"attempt_ack_timeout_ms":`...)
		b = strconv.AppendInt(b, j.AttemptAck/1e6, 10)
	}
	// Revision 8 on, each omitted when not set.
	b = appendTimeField(b, "run_at", j.RunAt)
	if j.Delay != 0 {
		b = append(b, `,"delay_ms":`...)
		b = strconv.AppendInt(b, j.Delay/1e6, 10)
	}
	if j.UniqueKey != "" {
		b = append(b, `,"unique_key":`...)
		b = appendString(b, j.UniqueKey)
	}
	if j.UniqueFor != 0 {
		b = append(b, `,"unique_for_ms":`...)
		b = strconv.AppendInt(b, j.UniqueFor/1e6, 10)
	}
	if j.ConcurrencyKey != "" { // revision 9 on
		b = append(b, `,"concurrency_key":`...)
		b = appendString(b, j.ConcurrencyKey)
	}
	b = appendTimeField(b, "submitted_at", j.SubmittedAt)
	b = append(b, `,"submit_seq":`...)
	b = strconv.AppendUint(b, j.SubmitSeq, 10)
	b = appendTimeField(b, "ready_at", j.ReadyAt)
	if j.LastReason != "" {
		b = append(b, `,"last_reason":`...)
		b = appendString(b, string(j.LastReason))
	}
	if j.HasPayload {
		b = append(b, `,"payload":`...)
		b = appendString(b, j.Payload)
	}
	return b
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
	if p.Retain != 0 { // revision 3 on; absent means 0, as every earlier policy was
		b = append(b, ',')
		b = field(b, "retain_ms", p.Retain)
	}
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

// appendString appends s as a JSON string: '"' and '\\' escaped, control
// characters (U+0000..U+001F, U+007F) as \u00xx, every other byte as is. The
// output is a function of s alone, so the same decision always encodes to
// the same bytes. Decoded inputs hold no control characters except in a
// payload, which is opaque, but every text is escaped so any string stays
// valid JSON. Decoded strings are valid UTF-8 and are copied as such (the
// encoder does not repair invalid UTF-8: a reader would read U+FFFD).
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
	V          int             `json:"v"`
	Cause      uint64          `json:"cause"`
	N          uint32          `json:"n"`
	Of         uint32          `json:"of"`
	At         string          `json:"at"`
	Kind       string          `json:"kind"`
	Accepted   bool            `json:"accepted"`
	Reason     string          `json:"reason"`
	Detail     string          `json:"detail"`
	Input      wireIdent       `json:"input"`
	Addressee  string          `json:"addressee"`
	Job        wireJob         `json:"job"`
	Policy     *wirePolicy     `json:"policy"`
	Rules      *wireRules      `json:"rules"`
	Checkpoint *wireCheckpoint `json:"checkpoint"`
	Capacity   *wireCapacity   `json:"capacity"`
	Standing   *wireStanding   `json:"standing"`
	DupOf      string          `json:"duplicate_of"`
	Limit      *wireLimit      `json:"limit"`
	Schedule   *wireSchedule   `json:"schedule"`
}

type wireSchedule struct {
	ID          string `json:"id"`
	Cron        string `json:"cron"`
	TZ          string `json:"tz"`
	Zone        string `json:"zone"`
	Queue       string `json:"queue"`
	Actor       string `json:"actor"`
	Missed      string `json:"missed"`
	Paused      bool   `json:"paused"`
	Next        string `json:"next"`
	Due         string `json:"due"`
	MissedFrom  string `json:"missed_from"`
	MissedTo    string `json:"missed_to"`
	MissedCount uint64 `json:"missed_count"`
	Anchor      string `json:"anchor"`
	Template    *struct {
		Priority       int64   `json:"priority"`
		MaxAttempts    uint64  `json:"max_attempts"`
		BackoffMS      int64   `json:"backoff_ms"`
		BackoffMax     int64   `json:"backoff_max_ms"`
		LeaseMS        int64   `json:"lease_ms"`
		AckTimeoutMS   int64   `json:"ack_timeout_ms"`
		Payload        *string `json:"payload"`
		ConcurrencyKey string  `json:"concurrency_key"`
		UniqueKey      string  `json:"unique_key"`
	} `json:"template"`
}

type wireLimit struct {
	Queue     string  `json:"queue"`
	Key       string  `json:"concurrency_key"`
	MaxActive *uint64 `json:"max_active"`
	Rate      uint64  `json:"rate"`
	PeriodMS  int64   `json:"period_ms"`
}

type wireStanding struct {
	Queue     string `json:"queue"`
	Window    uint64 `json:"window"`
	Strikes   uint64 `json:"strikes"`
	HeldUntil string `json:"held_until"`
}

type wireCapacity struct {
	Queue string `json:"queue"`
	Slots uint64 `json:"slots"`
	Until string `json:"until"`
}

type wireRules struct {
	Revision uint32 `json:"revision"`
}

type wireCheckpoint struct {
	InputSeq  uint64 `json:"input_seq"`
	StateHash string `json:"state_hash"`
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
	Stale         uint64 `json:"stale"`
	Late          uint64 `json:"late"`
	LateProgress  uint64 `json:"late_progress"`
	Duplicates    uint64 `json:"duplicates"`
	Conflicts     uint64 `json:"conflicts"`

	// Queue jobs (revision 4 on).
	Queue        string  `json:"queue"`
	Submitter    string  `json:"submitter"`
	Priority     int64   `json:"priority"`
	Turn         uint64  `json:"turn"`
	Attempt      uint64  `json:"attempt"`
	MaxAttempts  uint64  `json:"max_attempts"`
	BackoffMS    int64   `json:"backoff_ms"`
	BackoffMaxMS int64   `json:"backoff_max_ms"`
	AttemptLease int64   `json:"attempt_lease_ms"`
	AttemptAck   int64   `json:"attempt_ack_timeout_ms"`
	RunAt        string  `json:"run_at"`
	DelayMS      int64   `json:"delay_ms"`
	UniqueKey    string  `json:"unique_key"`
	UniqueForMS  int64   `json:"unique_for_ms"`
	ConcKey      string  `json:"concurrency_key"`
	SubmittedAt  string  `json:"submitted_at"`
	SubmitSeq    uint64  `json:"submit_seq"`
	ReadyAt      string  `json:"ready_at"`
	LastReason   string  `json:"last_reason"`
	Payload      *string `json:"payload"` // nil: absent
	Withheld     bool    `json:"withheld"`
}

type wirePolicy struct {
	MinLease       int64  `json:"min_lease_ms"`
	MaxLease       int64  `json:"max_lease_ms"`
	DefaultLease   int64  `json:"default_lease_ms"`
	AckTimeout     int64  `json:"ack_timeout_ms"`
	CancelTimeout  int64  `json:"cancel_timeout_ms"`
	MaxLifetime    int64  `json:"max_lifetime_ms"`
	MaxGenerations uint64 `json:"max_generations"`
	Retain         int64  `json:"retain_ms"`
}

// DecodeDecision parses a decision written by AppendDecision. Decisions come
// from the coordinator, not from untrusted actors, so this uses encoding/json;
// the auditor verifies decisions by comparing bytes, not through this.
func DecodeDecision(data []byte) (Decision, error) {
	var fast Decision
	if decodeDecisionFast(data, &fast) {
		return fast, nil
	}
	return decodeDecisionJSON(data)
}

// decodeDecisionJSON is DecodeDecision through encoding/json: the reference
// for decodeDecisionFast, and the path of anything not in canonical form.
func decodeDecisionJSON(data []byte) (Decision, error) {
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
	d.DuplicateOf = w.DupOf
	if l := w.Limit; l != nil {
		d.Limit = &Limit{Queue: l.Queue, ConcurrencyKey: l.Key, Rate: l.Rate, PeriodMS: l.PeriodMS}
		if l.MaxActive != nil {
			d.Limit.MaxActive, d.Limit.HasMaxActive = *l.MaxActive, true
		}
	}
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
	if err := jobFromWire(&w.Job, &d.Job); err != nil {
		return d, err
	}
	if w.Policy != nil {
		d.Policy = &Policy{
			MinLease: w.Policy.MinLease * 1e6, MaxLease: w.Policy.MaxLease * 1e6,
			DefaultLease: w.Policy.DefaultLease * 1e6, AckTimeout: w.Policy.AckTimeout * 1e6,
			CancelTimeout: w.Policy.CancelTimeout * 1e6, MaxLifetime: w.Policy.MaxLifetime * 1e6,
			MaxGenerations: w.Policy.MaxGenerations, Retain: w.Policy.Retain * 1e6,
		}
	}
	if w.Rules != nil {
		if w.Rules.Revision == 0 {
			return d, bad("rules revision", "0")
		}
		d.Revision = w.Rules.Revision
	}
	if w.Checkpoint != nil {
		h, ok := ParseStateHash([]byte(w.Checkpoint.StateHash))
		if !ok {
			return d, bad("state_hash", w.Checkpoint.StateHash)
		}
		d.Checkpoint = &Checkpoint{InputSeq: w.Checkpoint.InputSeq, StateHash: h}
	}
	if w.Capacity != nil {
		c := &Capacity{Queue: w.Capacity.Queue, Slots: w.Capacity.Slots}
		if c.Until, err = parseTime(w.Capacity.Until); err != nil {
			return d, err
		}
		d.Capacity = c
	}
	if w.Standing != nil {
		s := &Standing{Queue: w.Standing.Queue, Window: w.Standing.Window, Strikes: w.Standing.Strikes}
		if s.HeldUntil, err = parseTime(w.Standing.HeldUntil); err != nil {
			return d, err
		}
		d.Standing = s
	}
	if ws := w.Schedule; ws != nil {
		sc := &Schedule{ID: ws.ID, Cron: ws.Cron, TZ: ws.TZ, Zone: ws.Zone, Queue: ws.Queue, Actor: ws.Actor, Paused: ws.Paused, MissedCount: ws.MissedCount}
		if ws.Missed != "" {
			if sc.Missed, ok = ParseMissed(ws.Missed); !ok {
				return d, bad("schedule.missed", ws.Missed)
			}
		}
		for _, t := range []struct {
			dst *int64
			v   string
		}{{&sc.Next, ws.Next}, {&sc.Due, ws.Due}, {&sc.MissedFrom, ws.MissedFrom}, {&sc.MissedTo, ws.MissedTo}, {&sc.Anchor, ws.Anchor}} {
			if *t.dst, err = parseTime(t.v); err != nil {
				return d, err
			}
		}
		if wt := ws.Template; wt != nil {
			sc.Template = &ScheduleTemplate{Priority: wt.Priority, MaxAttempts: wt.MaxAttempts, BackoffMS: wt.BackoffMS, BackoffMax: wt.BackoffMax,
				LeaseMS: wt.LeaseMS, AckTimeoutMS: wt.AckTimeoutMS, ConcurrencyKey: wt.ConcurrencyKey, UniqueKey: wt.UniqueKey}
			if wt.Payload != nil {
				sc.Template.Payload, sc.Template.HasPayload = *wt.Payload, true
			}
		}
		d.Schedule = sc
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

// decodeDecisionFast decodes the canonical encoding that AppendDecision
// writes, without reflection: fields in their fixed order, no whitespace,
// strings without escapes (but a payload, which may hold any escape and
// valid UTF-8), times in the canonical UTC form. It reports
// false for anything else, which DecodeDecision then leaves to
// encoding/json; for the bytes it accepts, it gives the same Decision as
// encoding/json would (TestDecodeDecisionFast checks both). It is the hot
// path of every reader of decisions (a worker decodes each of its verdicts).
func decodeDecisionFast(b []byte, d *Decision) bool {
	r := decReader{b: b, ok: true}
	var ok bool
	if !r.lit(`{"v":1,"cause":`) {
		return false
	}
	d.Cause = r.uint()
	r.lit(`,"n":`)
	d.N = uint32(r.uintMax(1<<32 - 1))
	r.lit(`,"of":`)
	d.Of = uint32(r.uintMax(1<<32 - 1))
	r.lit(`,"at":`)
	d.At = r.time()
	r.lit(`,"kind":`)
	if d.Kind, ok = enumOf[Kind](kindNames[:], r.raw(), 1); !ok {
		return false
	}
	r.lit(`,"accepted":`)
	r.bool()
	r.lit(`,"reason":`)
	d.Reason = Reason(r.str())
	if r.opt(`,"detail":`) {
		d.Detail = r.str()
	}
	r.lit(`,"input":{"role":`)
	if d.Role, ok = enumOf[Role](roleNames[:], r.raw(), 0); !ok {
		return false
	}
	r.lit(`,"actor":`)
	d.Actor = r.str()
	r.lit(`,"verb":`)
	if d.Verb, ok = enumOf[Verb](verbNames[:], r.raw(), 0); !ok {
		return false
	}
	r.lit(`},"addressee":`)
	d.Addressee = r.str()
	r.lit(`,"job":{"id":`)
	j := &d.Job
	j.ID = r.str()
	if r.opt(`,"state":"NONE"}`) {
		j.State = StateNone
	} else {
		r.lit(`,"lease_id":`)
		j.LeaseID = r.str()
		r.lit(`,"generation":`)
		j.Generation = r.uint()
		r.lit(`,"holder":`)
		j.Holder = r.str()
		r.lit(`,"state":`)
		if j.State, ok = enumOf[State](stateNames[:], r.raw(), 0); !ok {
			return false
		}
		r.lit(`,"ack_state":`)
		if j.AckState, ok = enumOf[AckState](ackNames[:], r.raw(), 0); !ok {
			return false
		}
		if r.opt(`,"result":`) {
			if j.Result, ok = enumOf[Outcome](outcomeNames[:], r.raw(), 1); !ok {
				return false
			}
		}
		r.lit(`,"lease_ms":`)
		j.Duration = r.int() * 1e6
		j.IssuedAt = r.optTime(`,"issued_at":`)
		j.ExpiresAt = r.optTime(`,"expires_at":`)
		j.AckDeadline = r.optTime(`,"ack_deadline":`)
		j.AckedAt = r.optTime(`,"acked_at":`)
		r.lit(`,"renew_seq":`)
		j.RenewSeq = r.uint()
		j.RenewAt = r.optTime(`,"renew_at":`)
		r.lit(`,"progress_seq":`)
		j.ProgressSeq = r.uint()
		r.lit(`,"progress_value":`)
		j.ProgressValue = r.int()
		j.ProgressAt = r.optTime(`,"progress_at":`)
		r.lit(`,"cancel_requested":`)
		j.CancelReq = r.bool()
		r.lit(`,"cancel_acked":`)
		j.CancelAck = r.bool()
		j.CancelAt = r.optTime(`,"cancel_at":`)
		j.CancelBy = r.optTime(`,"cancel_by":`)
		j.EndedAt = r.optTime(`,"ended_at":`)
		r.lit(`,"lease_expired":`)
		j.LeaseExpired = r.bool()
		r.lit(`,"conflict":`)
		j.Conflict = r.bool()
		if r.opt(`,"conflict_with":`) {
			j.ConflictWith = r.str()
		}
		r.lit(`,"stale":`)
		j.Stale = r.uint()
		r.lit(`,"late":`)
		j.Late = r.uint()
		r.lit(`,"late_progress":`)
		j.LateProgress = r.uint()
		r.lit(`,"duplicates":`)
		j.Duplicates = r.uint()
		r.lit(`,"conflicts":`)
		j.Conflicts = r.uint()
		if r.opt(`,"queue":`) {
			r.queueFields(j)
		}
		j.Withheld = r.opt(`,"withheld":true`)
		r.lit(`}`)
	}
	if r.opt(`,"policy":{"min_lease_ms":`) {
		p := &Policy{}
		p.MinLease = r.int() * 1e6
		r.lit(`,"max_lease_ms":`)
		p.MaxLease = r.int() * 1e6
		r.lit(`,"default_lease_ms":`)
		p.DefaultLease = r.int() * 1e6
		r.lit(`,"ack_timeout_ms":`)
		p.AckTimeout = r.int() * 1e6
		r.lit(`,"cancel_timeout_ms":`)
		p.CancelTimeout = r.int() * 1e6
		r.lit(`,"max_lifetime_ms":`)
		p.MaxLifetime = r.int() * 1e6
		r.lit(`,"max_generations":`)
		p.MaxGenerations = r.uint()
		if r.opt(`,"retain_ms":`) {
			p.Retain = r.int() * 1e6
		}
		r.lit(`}`)
		d.Policy = p
	}
	if r.opt(`,"rules":{"revision":`) {
		d.Revision = uint32(r.uintMax(1<<32 - 1))
		if d.Revision == 0 {
			return false
		}
		r.lit(`}`)
	}
	if r.opt(`,"checkpoint":{"input_seq":`) {
		c := &Checkpoint{InputSeq: r.uint()}
		r.lit(`,"state_hash":`)
		h, ok := ParseStateHash(r.raw())
		if !ok {
			return false
		}
		c.StateHash = h
		r.lit(`}`)
		d.Checkpoint = c
	}
	if r.opt(`,"capacity":{"queue":`) {
		c := &Capacity{Queue: r.str()}
		r.lit(`,"slots":`)
		c.Slots = r.uint()
		c.Until = r.optTime(`,"until":`)
		r.lit(`}`)
		d.Capacity = c
	}
	if r.opt(`,"standing":{"queue":`) {
		s := &Standing{Queue: r.str()}
		r.lit(`,"window":`)
		s.Window = r.uint()
		r.lit(`,"strikes":`)
		s.Strikes = r.uint()
		s.HeldUntil = r.optTime(`,"held_until":`)
		r.lit(`}`)
		d.Standing = s
	}
	if r.opt(`,"duplicate_of":`) {
		d.DuplicateOf = r.str()
	}
	if r.opt(`,"limit":{"queue":`) {
		l := &Limit{Queue: r.str()}
		if r.opt(`,"concurrency_key":`) {
			l.ConcurrencyKey = r.str()
		}
		if r.opt(`,"max_active":`) {
			l.MaxActive, l.HasMaxActive = r.uint(), true
		}
		if r.opt(`,"rate":`) {
			l.Rate = r.uint()
			r.lit(`,"period_ms":`)
			l.PeriodMS = r.int()
		}
		r.lit(`}`)
		d.Limit = l
	}
	if r.opt(`,"schedule":{"id":`) { // revision 10 on
		sc := &Schedule{ID: r.str()}
		if r.opt(`,"cron":`) {
			sc.Cron = r.str()
			if r.opt(`,"tz":`) {
				sc.TZ = r.str()
			}
			if r.opt(`,"zone":`) {
				sc.Zone = r.str()
			}
			r.lit(`,"queue":`)
			sc.Queue = r.str()
			r.lit(`,"actor":`)
			sc.Actor = r.str()
			if r.opt(`,"missed":"once"`) {
				sc.Missed = MissedOnce
			}
			sc.Paused = r.opt(`,"paused":true`)
			sc.Anchor = r.optTime(`,"anchor":`)
			r.lit(`,"template":{`)
			t := &ScheduleTemplate{}
			first := true
			key := func(name string) bool {
				k := `"` + name + `":`
				if !first {
					k = "," + k
				}
				if r.opt(k) {
					first = false
					return true
				}
				return false
			}
			if key("priority") {
				t.Priority = r.int()
			}
			if key("max_attempts") {
				t.MaxAttempts = r.uint()
			}
			if key("backoff_ms") {
				t.BackoffMS = r.int()
			}
			if key("backoff_max_ms") {
				t.BackoffMax = r.int()
			}
			if key("lease_ms") {
				t.LeaseMS = r.int()
			}
			if key("ack_timeout_ms") {
				t.AckTimeoutMS = r.int()
			}
			if key("payload") {
				t.Payload, t.HasPayload = r.text(), true
			}
			if key("concurrency_key") {
				t.ConcurrencyKey = r.str()
			}
			if key("unique_key") {
				t.UniqueKey = r.str()
			}
			r.lit(`}`)
			sc.Template = t
		}
		sc.Next = r.optTime(`,"next":`)
		sc.Due = r.optTime(`,"due":`)
		if r.opt(`,"missed_from":`) {
			sc.MissedFrom = r.time()
			r.lit(`,"missed_to":`)
			sc.MissedTo = r.time()
			r.lit(`,"missed_count":`)
			sc.MissedCount = r.uint()
		}
		r.lit(`}`)
		d.Schedule = sc
	}
	r.lit(`}`)
	return r.ok && r.i == len(r.b)
}

// queueFields reads the queue fields of a job projection, after its
// "queue" key.
func (r *decReader) queueFields(j *Job) {
	j.Queue = r.str()
	r.lit(`,"submitter":`)
	j.Submitter = r.str()
	r.lit(`,"priority":`)
	j.Priority = r.int()
	r.lit(`,"turn":`)
	j.Turn = r.uint()
	r.lit(`,"attempt":`)
	j.Attempt = r.uint()
	r.lit(`,"max_attempts":`)
	j.MaxAttempts = r.uint()
	r.lit(`,"backoff_ms":`)
	j.Backoff = r.int() * 1e6
	r.lit(`,"backoff_max_ms":`)
	j.BackoffMax = r.int() * 1e6
	if r.opt(`,"attempt_lease_ms":`) {
		j.AttemptLease = r.int() * 1e6
	}
	if r.opt(`,"attempt_ack_timeout_ms":`) {
		j.AttemptAck = r.int() * 1e6
	}
	j.RunAt = r.optTime(`,"run_at":`)
	if r.opt(`,"delay_ms":`) {
		j.Delay = r.int() * 1e6
	}
	if r.opt(`,"unique_key":`) {
		j.UniqueKey = r.str()
	}
	if r.opt(`,"unique_for_ms":`) {
		j.UniqueFor = r.int() * 1e6
	}
	if r.opt(`,"concurrency_key":`) {
		j.ConcurrencyKey = r.str()
	}
	j.SubmittedAt = r.optTime(`,"submitted_at":`)
	r.lit(`,"submit_seq":`)
	j.SubmitSeq = r.uint()
	j.ReadyAt = r.optTime(`,"ready_at":`)
	if r.opt(`,"last_reason":`) {
		j.LastReason = Reason(r.str())
	}
	if r.opt(`,"payload":`) {
		j.Payload, j.HasPayload = r.text(), true
	}
}

// jobFromWire converts a job object decoded by encoding/json.
func jobFromWire(wj *wireJob, j *Job) error {
	var ok bool
	var err error
	bad := func(field, v string) error { return fmt.Errorf("events: decode job: bad %s %q", field, v) }
	j.ID, j.LeaseID, j.Generation, j.Holder = wj.ID, wj.LeaseID, wj.Generation, wj.Holder
	if j.State, ok = ParseState(wj.State); !ok {
		return bad("state", wj.State)
	}
	if wj.AckState != "" {
		if j.AckState, ok = ParseAckState(wj.AckState); !ok {
			return bad("ack_state", wj.AckState)
		}
	}
	if wj.Result != "" {
		if j.Result, ok = ParseOutcome(wj.Result); !ok {
			return bad("result", wj.Result)
		}
	}
	j.Duration = wj.LeaseMS * 1e6
	j.RenewSeq, j.ProgressSeq, j.ProgressValue = wj.RenewSeq, wj.ProgressSeq, wj.ProgressValue
	j.CancelReq, j.CancelAck, j.LeaseExpired, j.Conflict, j.ConflictWith = wj.CancelReq, wj.CancelAck, wj.LeaseExpired, wj.Conflict, wj.ConflictWith
	j.Stale, j.Late, j.LateProgress, j.Duplicates, j.Conflicts = wj.Stale, wj.Late, wj.LateProgress, wj.Duplicates, wj.Conflicts
	j.Queue, j.Submitter, j.Priority, j.Attempt, j.MaxAttempts = wj.Queue, wj.Submitter, wj.Priority, wj.Attempt, wj.MaxAttempts
	j.Turn = wj.Turn
	j.Backoff, j.BackoffMax = wj.BackoffMS*1e6, wj.BackoffMaxMS*1e6
	j.AttemptLease, j.AttemptAck = wj.AttemptLease*1e6, wj.AttemptAck*1e6
	j.Delay = wj.DelayMS * 1e6
	j.UniqueKey, j.UniqueFor = wj.UniqueKey, wj.UniqueForMS*1e6
	j.ConcurrencyKey = wj.ConcKey
	j.SubmitSeq, j.LastReason = wj.SubmitSeq, Reason(wj.LastReason)
	if wj.Payload != nil {
		j.Payload, j.HasPayload = *wj.Payload, true
	}
	j.Withheld = wj.Withheld
	for _, f := range []struct {
		dst *int64
		src string
	}{
		{&j.IssuedAt, wj.IssuedAt}, {&j.ExpiresAt, wj.ExpiresAt}, {&j.AckDeadline, wj.AckDeadline},
		{&j.AckedAt, wj.AckedAt}, {&j.RenewAt, wj.RenewAt}, {&j.ProgressAt, wj.ProgressAt},
		{&j.CancelAt, wj.CancelAt}, {&j.CancelBy, wj.CancelBy}, {&j.EndedAt, wj.EndedAt},
		{&j.SubmittedAt, wj.SubmittedAt}, {&j.ReadyAt, wj.ReadyAt}, {&j.RunAt, wj.RunAt},
	} {
		if *f.dst, err = parseTime(f.src); err != nil {
			return err
		}
	}
	return nil
}

// DecodeJob parses a job projection as AppendJob writes it (the "job"
// object of a decision, which the state API also answers on its own).
func DecodeJob(data []byte) (Job, error) {
	var wj wireJob
	if err := json.Unmarshal(data, &wj); err != nil {
		return Job{}, fmt.Errorf("events: decode job: %w", err)
	}
	var j Job
	if err := jobFromWire(&wj, &j); err != nil {
		return Job{}, err
	}
	return j, nil
}

// decReader reads the canonical decision encoding; ok turns false at the
// first byte that is not where or what the canonical form puts it, and
// every later read is then a no-op.
type decReader struct {
	b  []byte
	i  int
	ok bool
}

// lit consumes s, which must come next.
func (r *decReader) lit(s string) bool {
	if !r.ok || len(r.b)-r.i < len(s) || string(r.b[r.i:r.i+len(s)]) != s {
		r.ok = false
		return false
	}
	r.i += len(s)
	return true
}

// opt consumes s if it comes next.
func (r *decReader) opt(s string) bool {
	if !r.ok || len(r.b)-r.i < len(s) || string(r.b[r.i:r.i+len(s)]) != s {
		return false
	}
	r.i += len(s)
	return true
}

// enumOf returns the index of name in names, from first on (the names
// before first are not valid on the wire, except "" for index 0 when first
// is 0: role and verb may be empty).
func enumOf[E ~uint8](names []string, name []byte, first int) (E, bool) {
	for i := first; i < len(names); i++ {
		if names[i] == string(name) {
			return E(i), true
		}
	}
	return 0, false
}

// raw reads a string without escapes, control characters or non-ASCII
// bytes, and returns its content (aliasing the input).
func (r *decReader) raw() []byte {
	if !r.ok || r.i >= len(r.b) || r.b[r.i] != '"' {
		r.ok = false
		return nil
	}
	for j := r.i + 1; j < len(r.b); j++ {
		switch c := r.b[j]; {
		case c == '"':
			s := r.b[r.i+1 : j]
			r.i = j + 1
			return s
		case c == '\\' || c < 0x20 || c >= 0x80:
			// Escapes and non-ASCII text (valid UTF-8 or not) are left to
			// encoding/json, which has its own rules for them.
			r.ok = false
			return nil
		}
	}
	r.ok = false
	return nil
}

// text reads a string that may hold the escapes appendString writes (and
// the other escapes of JSON but surrogates) and valid UTF-8, as
// encoding/json reads it: it refuses (ok turns false) what encoding/json
// would read otherwise or reject: a raw control character, invalid UTF-8,
// an escaped surrogate.
func (r *decReader) text() string {
	if !r.ok || r.i >= len(r.b) || r.b[r.i] != '"' {
		r.ok = false
		return ""
	}
	start := r.i + 1
	j := start
	for j < len(r.b) && r.b[j] >= 0x20 && r.b[j] < 0x80 && r.b[j] != '"' && r.b[j] != '\\' {
		j++
	}
	if j < len(r.b) && r.b[j] == '"' { // no escape, ASCII only
		r.i = j + 1
		return string(r.b[start:j])
	}
	buf := make([]byte, 0, j-start+16)
	buf = append(buf, r.b[start:j]...)
	for j < len(r.b) {
		switch c := r.b[j]; {
		case c == '"':
			r.i = j + 1
			return string(buf)
		case c < 0x20:
			r.ok = false
			return ""
		case c >= 0x80:
			ru, n := utf8.DecodeRune(r.b[j:])
			if ru == utf8.RuneError && n == 1 {
				r.ok = false
				return ""
			}
			buf = append(buf, r.b[j:j+n]...)
			j += n
		case c != '\\':
			buf = append(buf, c)
			j++
		case j+1 >= len(r.b):
			r.ok = false
			return ""
		default:
			switch e := r.b[j+1]; e {
			case '"', '\\', '/':
				buf = append(buf, e)
				j += 2
			case 'b', 'f', 'n', 'r', 't':
				buf = append(buf, jsonShortEscapes[e])
				j += 2
			case 'u':
				ru, ok := jsonHex4(r.b, j+2)
				if !ok || ru >= 0xD800 && ru < 0xE000 {
					r.ok = false
					return ""
				}
				buf = utf8.AppendRune(buf, ru)
				j += 6
			default:
				r.ok = false
				return ""
			}
		}
	}
	r.ok = false
	return ""
}

// str is raw as a string.
func (r *decReader) str() string {
	b := r.raw()
	if len(b) == 0 {
		return ""
	}
	return string(b)
}

// uintMax reads a JSON non-negative integer not above max (any uint64).
func (r *decReader) uintMax(max uint64) uint64 {
	if !r.ok {
		return 0
	}
	j, v := r.i, uint64(0)
	for j < len(r.b) && r.b[j] >= '0' && r.b[j] <= '9' {
		d := uint64(r.b[j] - '0')
		if v > (max-d)/10 { // v*10+d would pass max (or overflow)
			r.ok = false
			return 0
		}
		v = v*10 + d
		j++
	}
	n := j - r.i
	// No digits, a leading zero, or a number that goes on (fraction,
	// exponent).
	if n == 0 || n > 1 && r.b[r.i] == '0' ||
		j < len(r.b) && (r.b[j] == '.' || r.b[j] == 'e' || r.b[j] == 'E') {
		r.ok = false
		return 0
	}
	r.i = j
	return v
}

func (r *decReader) uint() uint64 { return r.uintMax(1<<64 - 1) }

// int reads a JSON integer in the range of int64, with an optional minus.
func (r *decReader) int() int64 {
	if !r.ok {
		return 0
	}
	neg := r.i < len(r.b) && r.b[r.i] == '-'
	if neg {
		r.i++
		v := r.uintMax(1 << 63)
		if v == 0 { // "-0" is left to encoding/json
			r.ok = false
		}
		return int64(-v)
	}
	return int64(r.uintMax(1<<63 - 1))
}

func (r *decReader) bool() bool {
	if r.opt("true") {
		return true
	}
	if !r.opt("false") {
		r.ok = false
	}
	return false
}

// time reads a quoted time in the canonical UTC form.
func (r *decReader) time() int64 {
	if !r.ok || r.i >= len(r.b) || r.b[r.i] != '"' {
		r.ok = false
		return 0
	}
	end := r.i + 1
	for end < len(r.b) && end-r.i <= 31 && r.b[end] != '"' {
		end++
	}
	if end >= len(r.b) || r.b[end] != '"' || r.b[end-1] != 'Z' {
		r.ok = false
		return 0
	}
	t, ok := parseRFC3339Common(r.b[r.i+1 : end])
	if !ok {
		r.ok = false
		return 0
	}
	r.i = end + 1
	return t
}

func (r *decReader) optTime(key string) int64 {
	if !r.opt(key) {
		return 0
	}
	return r.time()
}
