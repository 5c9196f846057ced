package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/maknow/tenure/audit"
	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/heads"
	"github.com/maknow/tenure/streams"
)

// Signed chain heads (PROTOCOL.md §20.3) in the commands: serve signs and
// publishes them, `tenure heads` keeps them in a file, `tenure audit
// --heads` checks the files against the log, `tenure status` shows the last
// one of each coordinator.

// headKeyFile is the default head key of serve, in its data directory.
const headKeyFile = "head.nk"

// serveHeadFlags are serve's head flags.
type serveHeadFlags struct {
	key      string
	interval time.Duration
	off      bool
}

func (f *serveHeadFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.key, "head-key", "", "`FILE` of the nkey seed that signs the chain heads, created (mode 0600) if missing (default: "+headKeyFile+" in the --data directory; with --nats-url and no --data, none: no heads)")
	fs.DurationVar(&f.interval, "head-interval", coordinator.DefaultHeadInterval, "how often the live coordinator publishes a signed chain head (when decisions were stored, and every minute regardless)")
	fs.BoolVar(&f.off, "no-heads", false, "publish no signed chain heads")
}

// signer loads or creates the head key (nil with --no-heads) and logs its
// public key, which auditors pass to tenure audit --head-key. hasData says
// whether serve has a data directory of its own (it runs the embedded
// server, or --data was given): a coordinator connected to another server
// without one makes no key in the working directory, and signs no heads
// unless given --head-key.
func (f *serveHeadFlags) signer(dataDir string, hasData bool, log *slog.Logger) (nkeys.KeyPair, error) {
	if f.off {
		log.Info("no signed chain heads (--no-heads)")
		return nil, nil
	}
	path := f.key
	if path == "" && !hasData {
		log.Warn("no signed chain heads: connected to a server with no --data directory for the key; sign them with --head-key FILE (or --data DIR)")
		return nil, nil
	}
	if path == "" {
		dir, err := filepath.Abs(dataDir)
		if err != nil {
			return nil, err
		}
		path = filepath.Join(dir, headKeyFile)
	}
	kp, created, err := heads.LoadOrCreateKey(path)
	if err != nil {
		return nil, err
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, err
	}
	log.Info("signing chain heads", "head_key", pub, "file", path, "created", created, "subject", streams.HeadSubjectPrefix+"[.<partition>]", "interval", f.interval)
	return kp, nil
}

// keyList is a repeatable flag of public head keys.
type keyList []string

func (k *keyList) String() string { return strings.Join(*k, ",") }

func (k *keyList) Set(v string) error {
	if !nkeys.IsValidPublicServerKey(v) {
		return fmt.Errorf("%q is not a public server nkey (N..., as tenure serve logs it)", v)
	}
	*k = append(*k, v)
	return nil
}

// fileList is a repeatable flag of files.
type fileList []string

func (f *fileList) String() string { return strings.Join(*f, ",") }

func (f *fileList) Set(v string) error {
	if v == "" {
		return errors.New("empty file name")
	}
	*f = append(*f, v)
	return nil
}

var headsCmd = &command{
	name:    "heads",
	summary: "keep the coordinators' signed chain heads in a file, verified, for tenure audit --heads",
	usage:   "tenure heads [flags]",
	help: `Subscribes to the signed chain heads the live coordinators publish
(tenure.heads, tenure.heads.<partition>; PROTOCOL.md §20.3), verifies each
signature and appends each head, one JSON line, to --out (or stdout), until
interrupted. A head whose signature does not verify, or with --key one
signed by another key, is reported on stderr and not kept. Keep the file
outside NATS: tenure audit --heads FILE checks it against the log.`,
	run: runHeads,
}

// runHeads keeps the signed chain heads the coordinators publish: it
// verifies each and appends it, one JSON line, to --out (or stdout).
func runHeads(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	var conn connFlags
	conn.register(fs, "NATS server (default nats://127.0.0.1:4222, the local embedded one)")
	out := fs.String("out", "", "append the heads to `FILE` (created if missing) instead of stdout")
	var keys keyList
	fs.Var(&keys, "key", "accept only heads signed by this public `KEY` (repeatable; default: any key)")
	limit := fs.Int("n", 0, "stop after keeping this many heads (0: until interrupted)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *limit < 0 {
		return fmt.Errorf("%w: -n must be 0 or more", errUsage)
	}
	w := stdout
	var f *os.File
	if *out != "" {
		var err error
		if f, err = os.OpenFile(*out, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	defaultURL(&conn)
	nc, err := conn.connect("tenure-heads")
	if err != nil {
		return err
	}
	defer nc.Close()
	msgs := make(chan *nats.Msg, 1024)
	for _, subj := range streams.HeadFilters() {
		sub, err := nc.ChanSubscribe(subj, msgs)
		if err != nil {
			return fmt.Errorf("heads: subscribe to %s: %w", subj, err)
		}
		defer func() { _ = sub.Unsubscribe() }()
	}
	if err := nc.Flush(); err != nil {
		return fmt.Errorf("heads: %w", err)
	}
	fmt.Fprintf(stderr, "tenure heads: keeping the heads of %s\n", strings.Join(streams.HeadFilters(), " and "))
	kept := 0
	for {
		var m *nats.Msg
		select {
		case <-ctx.Done():
			return nil
		case m = <-msgs:
		}
		h, err := checkHead(m.Data, keys, "--key")
		if err == nil && !headSubjectOK(m.Subject, h.Stream) {
			err = fmt.Errorf("a head of %s on %s", h.Stream, m.Subject)
		}
		if err != nil {
			fmt.Fprintf(stderr, "tenure heads: not kept: %s: %v\n", m.Subject, err)
			continue
		}
		line, err := h.MarshalJSON()
		if err != nil {
			return err
		}
		if _, err := w.Write(append(line, '\n')); err != nil {
			return fmt.Errorf("heads: %w", err)
		}
		if f != nil {
			if err := f.Sync(); err != nil {
				return fmt.Errorf("heads: %w", err)
			}
		}
		if kept++; *limit > 0 && kept >= *limit {
			return nil
		}
	}
}

// checkHead parses and verifies one head; with keys (the values of flag
// keyFlag), its key must be one of them.
func checkHead(line []byte, keys []string, keyFlag string) (heads.Head, error) {
	h, err := heads.Parse(line)
	if err != nil {
		return h, err
	}
	if err := heads.Verify(h); err != nil {
		return h, err
	}
	if len(keys) > 0 && !slices.Contains(keys, h.Key) {
		return h, fmt.Errorf("signed by key %s, not one of %s %s", h.Key, keyFlag, strings.Join(keys, ", "))
	}
	return h, nil
}

// headSubjectOK reports whether a head of stream may come on subject: the
// HeadSubject of the partition of that stream (the heads of one partition
// are published on its subject only).
func headSubjectOK(subject, stream string) bool {
	rest, ok := strings.CutPrefix(subject, streams.HeadSubjectPrefix)
	if !ok || !strings.HasSuffix(stream, "_OUT") {
		return false
	}
	k, partitioned := streamPartition(stream)
	if rest == "" {
		return !partitioned
	}
	return partitioned && "."+k == rest
}

// streamPartition returns the partition token of a partition's decision
// stream, <prefix>_P<k>_OUT.
func streamPartition(stream string) (string, bool) {
	base, ok := strings.CutSuffix(stream, "_OUT")
	i := strings.LastIndex(base, "_P")
	if !ok || i < 0 || i+2 == len(base) {
		return "", false
	}
	k := base[i+2:]
	for _, c := range k {
		if c < '0' || c > '9' {
			return "", false
		}
	}
	return k, true
}

// auditHeads are the heads `tenure audit --heads` read: the witnesses of
// each decision stream, and the lines that are no witness (unreadable, a
// bad signature, a key not listed, a stream of no partition).
type auditHeads struct {
	files    fileList
	keys     keyList
	byStream map[string][]audit.Witness
	read     int      // heads read
	skipped  int      // heads of partitions not audited (--job)
	problems []string // "file:line: problem"
}

func (a *auditHeads) register(fs *flag.FlagSet) {
	fs.Var(&a.files, "heads", "check the signed chain heads in `FILE` (JSON lines, as tenure heads writes them) against the log (repeatable)")
	fs.Var(&a.keys, "head-key", "with --heads: trust only heads signed by this public `KEY` (repeatable; default: any key)")
}

// load reads the files for an audit of topos, the topologies audited, of
// all, every topology of the deployment.
func (a *auditHeads) load(all, topos []streams.Topology) error {
	if len(a.keys) > 0 && len(a.files) == 0 {
		return fmt.Errorf("%w: --head-key needs --heads", errUsage)
	}
	a.byStream = map[string][]audit.Witness{}
	for _, name := range a.files {
		if err := a.loadFile(name, all, topos); err != nil {
			return fmt.Errorf("--heads: %w", err)
		}
	}
	return nil
}

func (a *auditHeads) loadFile(name string, all, topos []streams.Topology) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		a.read++
		where := fmt.Sprintf("%s:%d", name, n)
		h, err := checkHead(line, a.keys, "--head-key")
		if err != nil {
			a.problems = append(a.problems, where+": "+err.Error())
			continue
		}
		audited := slices.ContainsFunc(topos, func(t streams.Topology) bool { return t.DecisionStream() == h.Stream })
		switch {
		case audited:
			a.byStream[h.Stream] = append(a.byStream[h.Stream], audit.Witness{
				Origin: fmt.Sprintf("%s (head of %s, key %s)", where, h.Coordinator, shortKey(h.Key)),
				Kind:   audit.WitnessDecision, Seq: h.Seq, Chain: h.Chain, Cause: h.InputSeq,
			})
		case slices.ContainsFunc(all, func(t streams.Topology) bool { return t.DecisionStream() == h.Stream }):
			a.skipped++ // another partition than --job's
		default:
			a.problems = append(a.problems, fmt.Sprintf("%s: a head of decision stream %s, which this deployment does not have", where, h.Stream))
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s:%d: %w", name, n+1, err)
	}
	return nil
}

// of returns the witnesses of topology t's decision stream.
func (a *auditHeads) of(t streams.Topology) []audit.Witness { return a.byStream[t.DecisionStream()] }

// report prints, after the summary, what reading the files found (nothing
// without --heads) and returns err or, when a head was unusable and err is
// nil, an error saying so: heads that cannot be checked fail the audit.
func (a *auditHeads) report(w io.Writer, err error) error {
	if len(a.files) == 0 {
		return err
	}
	fmt.Fprintf(w, "%-12s %d read from %d files, %d unusable", "heads:", a.read, len(a.files), len(a.problems))
	if a.skipped > 0 {
		fmt.Fprintf(w, ", %d of other partitions not checked", a.skipped)
	}
	fmt.Fprintln(w, " (each usable one is a witness above)")
	for _, p := range a.problems {
		fmt.Fprintln(w, "  "+p)
	}
	if err == nil && len(a.problems) > 0 {
		return fmt.Errorf("audit: %d of the heads given cannot be checked: unreadable, badly signed, or not signed by a --head-key", len(a.problems))
	}
	return err
}

// shortKey is the start of a public key, enough to tell keys apart in a
// finding.
func shortKey(k string) string {
	if len(k) > 12 {
		return k[:12] + "…"
	}
	return k
}

// printHeads prints, under `tenure status`'s table, the last chain head of
// each coordinator that published one.
func printHeads(w io.Writer, got []status) {
	for _, s := range got {
		h := s.Head
		if h == nil {
			continue
		}
		who := s.ID
		if s.Partition != "" {
			who += " partition " + s.Partition
		}
		fmt.Fprintf(w, "head %s: decision %d of %s, chain %s…, key %s, %s ago\n",
			who, h.Seq, h.Stream, h.Chain.String()[:16], h.Key, time.Since(h.At).Round(time.Second))
	}
}
