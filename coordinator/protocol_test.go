package coordinator_test

// The tests in this file keep PROTOCOL.md honest. They read the document and
// check it against the implementation; the conventions they rely on are
// described in its last section ("How the examples in this document are
// tested"). In short:
//
//   - ```json stored-input=<n>         the bodies the coordinator appends as inputs 1 (rules) and 2 (policy) on an empty log;
//   - ```json example=<name> [seq=<n>|as-seq=<n>] [leases-of=<example>] [msg-id=<id>] subject=<subject after "tenure.in.">
//     an input body, published exactly as written (the block's lines joined
//     by "\n"; but for the lease ids leases-of names: see docExample), in
//     document order; the next non-blank line after the block is
//     "expect: <kind>/<reason>[, <kind>/<reason>...]" (the input's verdicts,
//     in order), optionally followed by "await: <kind>/<reason>" (a derived
//     decision about the example's job to wait for before going on);
//   - ```json decision                 a decision in canonical form (whitespace aside);
//   - ```sh                            lines with `nats req|pub [-J] tenure.in.<...> '<body>'`
//     must carry a body the strict decoder accepts;
//   - the tables of the sections "Decision kinds" and "Reason codes" list
//     exactly events.Kinds() and events.Reasons().

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
)

const protocolDoc = "../PROTOCOL.md"

// docBlock is one fenced code block of the document.
type docBlock struct {
	line  int               // 1-based line of the opening fence
	lang  string            // first word of the info string
	attrs map[string]string // key=value words of the info string
	flags []string          // other words of the info string
	body  string            // content, lines joined by "\n", no final newline
	after []string          // non-blank lines of the paragraph right after the block
}

// docExample is a tagged input example with its expectations.
type docExample struct {
	docBlock
	name    string
	subject string // full subject, tenure.in. included
	seq     uint64 // expected input sequence, 0 if not given
	// asSeq is the sequence the document gives an input whose sequence
	// depends on the ticks appended before it (as-seq=<n>): the lease
	// ids that later examples name (leasesOf) are written as if it was
	// stored as input n. leasesOf names such an example: every lease id
	// in this body that input n would have created for one of the jobs
	// the body names (§14) is replaced, before publishing, by the one the
	// sequence that example's input got gives.
	asSeq    uint64
	leasesOf string
	msgID    string   // Nats-Msg-Id to publish with (twice), if any
	expect   []string // kind/reason of each verdict, in order
	await    string   // kind/reason of a derived decision to wait for, if any
}

type protocolDocument struct {
	lines  []string
	blocks []docBlock
}

func readProtocolDoc(t *testing.T) *protocolDocument {
	t.Helper()
	data, err := os.ReadFile(protocolDoc)
	if err != nil {
		t.Fatalf("read %s: %v", protocolDoc, err)
	}
	d := &protocolDocument{lines: strings.Split(string(data), "\n")}
	for i := 0; i < len(d.lines); i++ {
		open, ok := strings.CutPrefix(d.lines[i], "```")
		if !ok {
			continue
		}
		b := docBlock{line: i + 1, attrs: map[string]string{}}
		for j, w := range strings.Fields(open) {
			switch k, v, kv := strings.Cut(w, "="); {
			case j == 0:
				b.lang = w
			case kv:
				b.attrs[k] = v
			default:
				b.flags = append(b.flags, w)
			}
		}
		var content []string
		i++
		for ; i < len(d.lines) && !strings.HasPrefix(d.lines[i], "```"); i++ {
			content = append(content, d.lines[i])
		}
		if i == len(d.lines) {
			t.Fatalf("%s:%d: unterminated code block", protocolDoc, b.line)
		}
		b.body = strings.Join(content, "\n")
		// The paragraph right after the block.
		k := i + 1
		for k < len(d.lines) && strings.TrimSpace(d.lines[k]) == "" {
			k++
		}
		for ; k < len(d.lines) && strings.TrimSpace(d.lines[k]) != "" && !strings.HasPrefix(d.lines[k], "```"); k++ {
			b.after = append(b.after, strings.TrimSpace(d.lines[k]))
		}
		d.blocks = append(d.blocks, b)
	}
	return d
}

// examples returns the tagged input examples, in document order.
func (d *protocolDocument) examples(t *testing.T) []docExample {
	t.Helper()
	var out []docExample
	names := map[string]bool{}
	for _, b := range d.blocks {
		name, ok := b.attrs["example"]
		if !ok {
			continue
		}
		where := fmt.Sprintf("%s:%d: example %q", protocolDoc, b.line, name)
		if b.lang != "json" {
			t.Fatalf("%s: info string must start with json", where)
		}
		if names[name] {
			t.Fatalf("%s: name used twice", where)
		}
		names[name] = true
		ex := docExample{docBlock: b, name: name, msgID: b.attrs["msg-id"]}
		sub, ok := b.attrs["subject"]
		if !ok || strings.HasPrefix(sub, "tenure.") {
			t.Fatalf("%s: want subject=<subject without tenure.in.>", where)
		}
		ex.subject = events.InputPrefix + "." + sub
		if s, ok := b.attrs["seq"]; ok {
			n, err := strconv.ParseUint(s, 10, 64)
			if err != nil || n == 0 {
				t.Fatalf("%s: bad seq=%q", where, s)
			}
			ex.seq = n
		}
		if s, ok := b.attrs["as-seq"]; ok {
			n, err := strconv.ParseUint(s, 10, 64)
			if err != nil || n == 0 || ex.seq != 0 {
				t.Fatalf("%s: bad as-seq=%q (with seq=%d)", where, s, ex.seq)
			}
			ex.asSeq = n
		}
		if o, ok := b.attrs["leases-of"]; ok {
			if !names[o] {
				t.Fatalf("%s: leases-of=%s names no earlier example", where, o)
			}
			ex.leasesOf = o
		}
		if len(b.after) == 0 || !strings.HasPrefix(b.after[0], "expect:") {
			t.Fatalf("%s: the paragraph after the block must start with \"expect: <kind>/<reason>\"", where)
		}
		for _, v := range strings.Split(strings.TrimPrefix(b.after[0], "expect:"), ",") {
			v = strings.Trim(strings.TrimSpace(v), "`")
			checkKindReason(t, where, v)
			ex.expect = append(ex.expect, v)
		}
		if len(b.after) > 1 {
			if a, ok := strings.CutPrefix(b.after[1], "await:"); ok {
				ex.await = strings.Trim(strings.TrimSpace(a), "`")
				checkKindReason(t, where, ex.await)
			}
		}
		out = append(out, ex)
	}
	if len(out) == 0 {
		t.Fatalf("%s: no tagged examples", protocolDoc)
	}
	return out
}

// checkKindReason fails unless v is <kind>/<reason> from the closed sets.
func checkKindReason(t *testing.T, where, v string) {
	t.Helper()
	k, r, ok := strings.Cut(v, "/")
	if _, known := events.ParseKind(k); !ok || !known || !events.Reason(r).Known() {
		t.Fatalf("%s: %q is not <kind>/<reason> of the protocol", where, v)
	}
}

// tableKeys returns the backquoted first cells of the table rows of the
// section whose "## " heading contains title.
func (d *protocolDocument) tableKeys(t *testing.T, title string) []string {
	t.Helper()
	in, found := false, false
	var keys []string
	for _, l := range d.lines {
		if strings.HasPrefix(l, "## ") {
			in = strings.Contains(l, title)
			found = found || in
			continue
		}
		if !in || !strings.HasPrefix(l, "| `") {
			continue
		}
		cell, _, _ := strings.Cut(strings.TrimPrefix(l, "| "), " |")
		keys = append(keys, strings.Trim(cell, "`"))
	}
	if !found {
		t.Fatalf("%s: no section %q", protocolDoc, title)
	}
	return keys
}

// The document's static parts: the closed sets, the decision examples, the
// CLI commands, and the shape of the tagged examples.
func TestProtocolDocument(t *testing.T) {
	d := readProtocolDoc(t)

	var kinds []string
	for _, k := range events.Kinds() {
		kinds = append(kinds, k.String())
	}
	if got := d.tableKeys(t, "Decision kinds"); !slices.Equal(got, kinds) {
		t.Errorf("the table of decision kinds lists\n %v\nthe implementation has\n %v", got, kinds)
	}
	var reasons []string
	for _, r := range events.Reasons() {
		reasons = append(reasons, string(r.Reason))
	}
	if got := d.tableKeys(t, "Reason codes"); !slices.Equal(got, reasons) {
		t.Errorf("the table of reason codes lists\n %v\nthe implementation has\n %v", got, reasons)
	}

	cliRe := regexp.MustCompile(`^nats (?:req|pub(?: -J)?) (\S+) '([^']*)'`)
	var decisions, commands int
	for _, b := range d.blocks {
		where := fmt.Sprintf("%s:%d", protocolDoc, b.line)
		switch {
		case b.lang == "json" && slices.Contains(b.flags, "decision"):
			decisions++
			var compact bytes.Buffer
			if err := json.Compact(&compact, []byte(b.body)); err != nil {
				t.Errorf("%s: decision is not JSON: %v", where, err)
				continue
			}
			dec, err := events.DecodeDecision(compact.Bytes())
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			if canon := events.AppendDecision(nil, &dec); !bytes.Equal(canon, compact.Bytes()) {
				t.Errorf("%s: decision is not in canonical form:\n doc   %s\n canon %s", where, compact.Bytes(), canon)
			}
		case b.lang == "sh":
			for _, l := range strings.Split(b.body, "\n") {
				m := cliRe.FindStringSubmatch(l)
				if m == nil {
					continue
				}
				commands++
				var in events.Input
				if err := events.DecodeInput(m[1], []byte(m[2]), &in); err != nil {
					t.Errorf("%s: %s: %v", where, l, err)
				}
			}
		}
	}
	if decisions == 0 || commands == 0 {
		t.Errorf("%s: %d decision examples and %d nats commands: want some of each", protocolDoc, decisions, commands)
	}

	// Every example's subject parses and its role may publish its verb (or
	// the example expects the rejection), and the sequences are increasing.
	var last uint64
	for _, ex := range d.examples(t) {
		if ex.seq != 0 {
			if ex.seq <= last {
				t.Errorf("%s:%d: example %q: seq=%d after %d", protocolDoc, ex.line, ex.name, ex.seq, last)
			}
			last = ex.seq
		}
		if _, err := events.ParseInputSubject(ex.subject); err != nil && !strings.HasPrefix(ex.expect[0], "rejected/") {
			t.Errorf("%s:%d: example %q: %v", protocolDoc, ex.line, ex.name, err)
		}
	}
}

// decisionLog collects every decision of the decision stream, in order,
// through an ordered consumer, as a consumer of decisions would.
type decisionLog struct {
	mu      sync.Mutex
	all     []events.Decision
	raw     [][]byte
	byCause map[uint64][]int
	changed chan struct{} // signalled (never closed) after each decision
	err     error
}

func followDecisions(t *testing.T, js jetstream.JetStream) *decisionLog {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cons, err := js.OrderedConsumer(ctx, "TENURE_OUT", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatalf("ordered consumer on TENURE_OUT: %v", err)
	}
	l := &decisionLog{byCause: map[uint64][]int{}, changed: make(chan struct{}, 1)}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		d, err := events.DecodeDecision(m.Data())
		l.mu.Lock()
		if err != nil && l.err == nil {
			l.err = fmt.Errorf("decision on %s: %w", m.Subject(), err)
		}
		if err == nil {
			l.byCause[d.Cause] = append(l.byCause[d.Cause], len(l.all))
			l.all = append(l.all, d)
			l.raw = append(l.raw, slices.Clone(m.Data()))
		}
		l.mu.Unlock()
		select {
		case l.changed <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatalf("consume TENURE_OUT: %v", err)
	}
	t.Cleanup(cc.Stop)
	return l
}

// wait waits until cond, called under the lock, holds.
func (l *decisionLog) wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	timeout := time.NewTimer(20 * time.Second)
	defer timeout.Stop()
	for {
		l.mu.Lock()
		ok, err := cond(), l.err
		l.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return
		}
		select {
		case <-l.changed:
		case <-timeout.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// decisionsOf waits for every decision of input seq and returns them.
func (l *decisionLog) decisionsOf(t *testing.T, seq uint64) (ds []events.Decision, raw [][]byte) {
	t.Helper()
	l.wait(t, fmt.Sprintf("the decisions of input %d", seq), func() bool {
		idx := l.byCause[seq]
		return len(idx) > 0 && len(idx) == int(l.all[idx[0]].Of)
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, i := range l.byCause[seq] {
		ds = append(ds, l.all[i])
		raw = append(raw, l.raw[i])
	}
	return ds, raw
}

// pubAck is the JetStream publish acknowledgement as it travels on the wire.
type pubAck struct {
	Stream    string `json:"stream"`
	Seq       uint64 `json:"seq"`
	Duplicate bool   `json:"duplicate"`
	Error     *struct {
		Code        int    `json:"code"`
		ErrCode     int    `json:"err_code"`
		Description string `json:"description"`
	} `json:"error"`
}

// publishExample stores one example body and returns its PubAck. core
// selects a bare request on the core connection (the reply is the raw
// PubAck JSON) instead of the JetStream client.
func publishExample(t *testing.T, nc *nats.Conn, js jetstream.JetStream, ex *docExample, core bool) pubAck {
	t.Helper()
	m := nats.NewMsg(ex.subject)
	m.Data = []byte(ex.body)
	if ex.msgID != "" {
		m.Header.Set(jetstream.MsgIDHeader, ex.msgID)
	}
	if core {
		reply, err := nc.RequestMsg(m, 10*time.Second)
		if err != nil {
			t.Fatalf("example %q: request on %s: %v", ex.name, ex.subject, err)
		}
		var a pubAck
		if err := json.Unmarshal(reply.Data, &a); err != nil {
			t.Fatalf("example %q: reply %q is not a PubAck: %v", ex.name, reply.Data, err)
		}
		if a.Error != nil {
			t.Fatalf("example %q: PubAck error %+v", ex.name, *a.Error)
		}
		return a
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := js.PublishMsg(ctx, m)
	if err != nil {
		t.Fatalf("example %q: publish on %s: %v", ex.name, ex.subject, err)
	}
	return pubAck{Stream: a.Stream, Seq: a.Sequence, Duplicate: a.Duplicate}
}

// The example story of PROTOCOL.md, published to a fresh Tenure in document
// order; every documented verdict must be the coordinator's.
func TestProtocolExamples(t *testing.T) {
	doc := readProtocolDoc(t)
	examples := doc.examples(t)
	stored := map[string]*docBlock{}
	for i := range doc.blocks {
		if b := &doc.blocks[i]; b.lang == "json" && b.attrs["stored-input"] != "" {
			stored[b.attrs["stored-input"]] = b
		}
	}
	if stored["1"] == nil || stored["2"] == nil {
		t.Fatalf("%s: want ```json stored-input=1 and stored-input=2 blocks", protocolDoc)
	}
	// The lease key of the story, which the rules input (input 1) carries.
	var rules events.Input
	if err := events.DecodeInput("tenure.in.coord.c1._.rules", []byte(stored["1"].body), &rules); err != nil {
		t.Fatalf("%s:%d: stored input 1: %v", protocolDoc, stored["1"].line, err)
	}

	srv, nc, js := newServer(t)
	log := followDecisions(t, js)
	r := startCoordinator(t, srv.ClientURL(), "c1", func(c *coordinator.Config) { c.LeaseKey = &rules.LeaseKey })

	// On an empty log the coordinator appends the rules as input 1 and the
	// default policy as input 2.
	if ds, _ := log.decisionsOf(t, 1); verdict(ds).Kind != events.KindRulesSet {
		t.Fatalf("input 1: %s/%s, want the coordinator's rules_set", verdict(ds).Kind, verdict(ds).Reason)
	}
	if ds, _ := log.decisionsOf(t, 2); verdict(ds).Kind != events.KindPolicySet {
		t.Fatalf("input 2: %s/%s, want the coordinator's policy_set", verdict(ds).Kind, verdict(ds).Reason)
	}
	ctx := context.Background()
	in, err := js.Stream(ctx, "TENURE_IN")
	if err != nil {
		t.Fatal(err)
	}
	for seq, verb := range map[uint64]string{1: "rules", 2: "policy"} {
		m, err := in.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		b := stored[strconv.FormatUint(seq, 10)]
		if want := "tenure.in.coord.c1._." + verb; m.Subject != want || string(m.Data) != b.body {
			t.Fatalf("%s:%d: input %d is documented as\n %s\nthe coordinator stored on %s\n %s", protocolDoc, b.line, seq, b.body, m.Subject, m.Data)
		}
	}

	gotSeq := map[string]uint64{} // example name -> the input sequence it got
	asSeq := map[string]uint64{}  // example name -> its as-seq
	for i := range examples {
		ex := &examples[i]
		where := fmt.Sprintf("%s:%d: example %q", protocolDoc, ex.line, ex.name)
		if ex.leasesOf != "" {
			ex.body = rewriteLeaseIDs(t, where, ex, rules.LeaseKey, asSeq[ex.leasesOf], gotSeq[ex.leasesOf])
		}
		core := i%2 == 1 // every other example through a bare core request
		a := publishExample(t, nc, js, ex, core)
		if a.Stream != "TENURE_IN" || a.Seq == 0 || a.Duplicate {
			t.Fatalf("%s: PubAck %+v: want a new input of TENURE_IN", where, a)
		}
		if ex.seq != 0 && a.Seq != ex.seq {
			t.Fatalf("%s: stored as input %d, the document says %d (lease ids in later examples depend on it)", where, a.Seq, ex.seq)
		}
		gotSeq[ex.name], asSeq[ex.name] = a.Seq, ex.asSeq
		if ex.msgID != "" {
			again := publishExample(t, nc, js, ex, core)
			if !again.Duplicate || again.Seq != a.Seq {
				t.Fatalf("%s: publishing again with Nats-Msg-Id %s gave %+v, want a duplicate of input %d", where, ex.msgID, again, a.Seq)
			}
		}

		ds, raw := log.decisionsOf(t, a.Seq)
		var got []string
		for j, d := range ds {
			if d.Kind.Derived() {
				continue
			}
			got = append(got, d.Kind.String()+"/"+string(d.Reason))
			t.Logf("input %d %s: %s %s", a.Seq, ex.name, events.DecisionSubject(&d), raw[j])
			// Documented in §3.2 and §14.
			if d.Role == events.RoleWorker && d.Addressee != d.Actor {
				t.Errorf("%s: verdict addressed to %s, not to the worker %s", where, d.Addressee, d.Actor)
			}
			if want := docLeaseID(rules.LeaseKey, a.Seq, d.Job.ID); (d.Kind == events.KindGranted || d.Kind == events.KindOffered) && d.Job.LeaseID != want {
				t.Errorf("%s: lease id %s, §14 says %s", where, d.Job.LeaseID, want)
			}
		}
		if !slices.Equal(got, ex.expect) {
			t.Fatalf("%s (input %d): verdicts %v, the document expects %v", where, a.Seq, got, ex.expect)
		}

		if ex.await != "" {
			job := strings.Split(ex.subject, ".")[4]
			log.wait(t, where+": "+ex.await, func() bool {
				for _, d := range log.all {
					if d.Kind.Derived() && d.Job.ID == job && d.Kind.String()+"/"+string(d.Reason) == ex.await {
						return true
					}
				}
				return false
			})
		}
	}

	waitCaughtUp(t, js, r)
	checkChain(t, js)
}

// The permissions of PROTOCOL.md §4, on a real server: the documented
// configuration lets worker w1 take part with a bare connection, and stops it
// from speaking for w2 or reading w2's decisions.
func TestProtocolPermissions(t *testing.T) {
	doc := readProtocolDoc(t)
	var conf *docBlock
	for i := range doc.blocks {
		if b := &doc.blocks[i]; slices.Contains(b.flags, "nats-server-config") {
			conf = b
		}
	}
	if conf == nil {
		t.Fatalf("%s: no ```conf nats-server-config block", protocolDoc)
	}
	passwords := map[string]string{}
	for _, m := range regexp.MustCompile(`user: (\S+), password: ([^,\s}]+)`).FindAllStringSubmatch(conf.body, -1) {
		passwords[m[1]] = m[2]
	}
	for _, u := range []string{"coord", "w1"} {
		if passwords[u] == "" {
			t.Fatalf("%s:%d: the configuration has no user %s with a password", protocolDoc, conf.line, u)
		}
	}
	path := filepath.Join(t.TempDir(), "server.conf")
	if err := os.WriteFile(path, []byte(conf.body), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := testutil.StartServer(t, testutil.ConfigFile(path))
	u, err := url.Parse(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword("coord", passwords["coord"])
	r := startCoordinator(t, u.String(), "c1")
	_, js := testutil.Connect(t, u.String())
	ctx := context.Background()
	testutil.WaitFor(t, 20*time.Second, "the coordinator's streams", func() bool {
		_, err := js.Stream(ctx, "TENURE_OUT")
		return err == nil
	})
	log := followDecisions(t, js)
	log.decisionsOf(t, 1) // the coordinator's default policy

	errs := make(chan error, 16)
	w1, err := nats.Connect(srv.ClientURL(),
		nats.UserInfo("w1", passwords["w1"]),
		nats.CustomInboxPrefix("_INBOX_w1"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatalf("connect as w1: %v", err)
	}
	defer w1.Close()
	// w1 takes part: PubAck on its own inbox; its verdict through its own
	// consumer, created and pulled under the worker API prefix with bare
	// requests, as §4 says.
	reply, err := w1.Request("tenure.in.worker.w1.perm-1.acquire", []byte(`{"v":1,"lease_ms":600000}`), 10*time.Second)
	if err != nil {
		t.Fatalf("w1 acquire: %v", err)
	}
	var a pubAck
	if err := json.Unmarshal(reply.Data, &a); err != nil || a.Seq == 0 || a.Error != nil {
		t.Fatalf("w1 acquire: reply %s (%v), want a PubAck", reply.Data, err)
	}
	create := `{"stream_name":"TENURE_OUT","config":{"name":"tw_w1_0","filter_subject":"tenure.out.w1.>","deliver_policy":"by_start_sequence","opt_start_seq":1,"ack_policy":"none","inactive_threshold":30000000000}}`
	resp, err := w1.Request("JS.TENURE.API.CONSUMER.CREATE.TENURE_OUT.tw_w1_0.tenure.out.w1.>", []byte(create), 10*time.Second)
	if err != nil || strings.Contains(string(resp.Data), `"error"`) {
		t.Fatalf("w1 creating its consumer: %v %s", err, resp.Data)
	}
	inbox := "_INBOX_w1.pull"
	mine, err := w1.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	if err := w1.PublishRequest("JS.TENURE.API.CONSUMER.MSG.NEXT.TENURE_OUT.tw_w1_0", inbox, []byte(`{"batch":100,"expires":5000000000}`)); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := mine.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("w1's verdict for input %d: %v", a.Seq, err)
		}
		if !strings.HasPrefix(m.Reply, "$JS.ACK.TENURE_OUT.tw_w1_0.") {
			t.Fatalf("a delivery of %s with reply %q", m.Subject, m.Reply)
		}
		d, err := events.DecodeDecision(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		if d.Cause != a.Seq {
			continue
		}
		if d.Kind != events.KindGranted || m.Subject != "tenure.out.w1.perm-1.granted" {
			t.Fatalf("w1's verdict: %s %s/%s, want granted", m.Subject, d.Kind, d.Reason)
		}
		break
	}

	// Speaking for w2, or reading w2's decisions: refused by the server.
	expectViolation := func(what string) {
		t.Helper()
		select {
		case err := <-errs:
			if !errors.Is(err, nats.ErrPermissionViolation) {
				t.Fatalf("%s: %v, want a permissions violation", what, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no permissions violation", what)
		}
	}
	if err := w1.Publish("tenure.in.worker.w2.perm-1.release", []byte(`{"v":1,"lease_id":"L2","generation":1}`)); err != nil {
		t.Fatal(err)
	}
	_ = w1.Flush()
	expectViolation("w1 publishing as w2")
	for _, subj := range []string{"tenure.out.w2.>", "tenure.out.w1.>"} {
		if _, err := w1.SubscribeSync(subj); err != nil {
			t.Fatal(err)
		}
		_ = w1.Flush()
		expectViolation("w1 subscribing to " + subj)
	}
	// Another consumer name: its account imports none, nothing answers.
	if _, err := w1.Request("JS.TENURE.API.CONSUMER.CREATE.TENURE_OUT.other.tenure.out.w1.>", []byte(create), 5*time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("w1 creating a consumer of another name: %v, want no responders", err)
	}

	waitCaughtUp(t, js, r)
	inputs, _ := checkChain(t, js)
	for _, in := range inputs {
		if strings.HasPrefix(in.subject, "tenure.in.worker.w2.") {
			t.Fatalf("input %d on %s was stored despite the permissions", in.seq, in.subject)
		}
	}
}

// rewriteLeaseIDs returns ex's body with every lease id that input
// documented (as-seq) would have created for a job the body names
// replaced by the one input got creates (PROTOCOL.md §14). It fails if the
// body names none of those: the document's ids would be wrong.
func rewriteLeaseIDs(t *testing.T, where string, ex *docExample, key [events.LeaseKeyLen]byte, documented, got uint64) string {
	t.Helper()
	if documented == 0 {
		t.Fatalf("%s: leases-of=%s: that example has no as-seq", where, ex.leasesOf)
	}
	var in events.Input
	if err := events.DecodeInput(ex.subject, []byte(ex.body), &in); err != nil && !strings.HasPrefix(ex.expect[0], "rejected/") {
		t.Fatalf("%s: %v", where, err)
	}
	jobs := []string{in.Job}
	for _, e := range in.Batch {
		jobs = append(jobs, e.Job)
	}
	if len(in.Batch) == 0 { // a body the decoder refuses: the jobs named in it
		for _, m := range regexp.MustCompile(`"job":"([A-Za-z0-9_-]+)"`).FindAllStringSubmatch(ex.body, -1) {
			jobs = append(jobs, m[1])
		}
	}
	body, n := ex.body, 0
	for _, job := range jobs {
		doc := docLeaseID(key, documented, job)
		if strings.Contains(body, doc) {
			n++
			body = strings.ReplaceAll(body, doc, docLeaseID(key, got, job))
		}
	}
	if n == 0 {
		t.Fatalf("%s: names no lease id input %d (as-seq of %s) creates for its jobs %v", where, documented, ex.leasesOf, jobs)
	}
	return body
}

// docLeaseID is the lease id PROTOCOL.md §14 derives for the lease created
// by input seq for job (unpartitioned), written from the document, apart
// from the projector's code.
func docLeaseID(key [events.LeaseKeyLen]byte, seq uint64, job string) string {
	msg := []byte("tenure lease id v2\x00")
	msg = binary.BigEndian.AppendUint32(msg, 0) // partition index
	msg = binary.BigEndian.AppendUint32(msg, 0) // partition count
	msg = binary.BigEndian.AppendUint64(msg, seq)
	msg = binary.BigEndian.AppendUint32(msg, uint32(len(job)))
	msg = append(msg, job...)
	mac := hmac.New(sha256.New, key[:])
	mac.Write(msg)
	return "L" + strconv.FormatUint(seq, 10) + "-" + base64.RawURLEncoding.EncodeToString(mac.Sum(nil)[:16])
}
