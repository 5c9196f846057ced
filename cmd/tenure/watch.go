package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/streams"
)

func defaultURL(c *connFlags) {
	if c.url == "" {
		c.url = "nats://127.0.0.1:4222"
	}
}

// runWatch prints decisions as they are appended, filtered by job, holder
// and kind, as a table or as JSON lines (the decision bodies themselves).
func runWatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("watch", stderr)
	var conn connFlags
	conn.register(fs, "NATS server (default nats://127.0.0.1:4222, the local embedded one)")
	job := fs.String("job", "", "only decisions about this job")
	holder := fs.String("holder", "", "only decisions addressed to or held by this actor")
	kind := fs.String("kind", "", "only decisions of this kind (e.g. expired, stale, conflict)")
	format := fs.String("format", "table", "table or json (one decision per line, as stored)")
	all := fs.Bool("all", false, "start from the first decision instead of new ones")
	limit := fs.Int("n", 0, "stop after this many decisions (0: until interrupted)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *format != "table" && *format != "json" {
		return fmt.Errorf("%w: --format must be table or json", errUsage)
	}
	for _, tok := range []string{*job, *holder} {
		if tok != "" && !events.ValidToken(tok) {
			return fmt.Errorf("%w: %q is not a valid id", errUsage, tok)
		}
	}
	if *kind != "" {
		if _, ok := events.ParseKind(*kind); !ok {
			return fmt.Errorf("%w: unknown kind %q", errUsage, *kind)
		}
	}
	defaultURL(&conn)
	nc, err := conn.connect("tenure-watch")
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	filter := events.DecisionPrefix + ".*." + or(*job, "*") + "." + or(*kind, "*")
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}, DeliverPolicy: jetstream.DeliverNewPolicy}
	if *all {
		cfg.DeliverPolicy = jetstream.DeliverAllPolicy
	}
	cons, err := js.OrderedConsumer(ctx, streams.Topology{}.DecisionStream(), cfg)
	if err != nil {
		return fmt.Errorf("watch: %w", streams.Classify(err))
	}
	it, err := cons.Messages()
	if err != nil {
		return err
	}
	go func() { <-ctx.Done(); it.Stop() }()
	tw := tabwriter.NewWriter(stdout, 0, 0, 1, ' ', 0)
	if *format == "table" {
		fmt.Fprintln(tw, "AT\tINPUT\tKIND\tREASON\tJOB\tGEN\tHOLDER\tSTATE\tEXPIRES\tBY")
		tw.Flush()
	}
	n := 0
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			return err
		}
		d, err := events.DecodeDecision(m.Data())
		if err != nil {
			fmt.Fprintln(stderr, "tenure watch: undecodable decision:", err)
			continue
		}
		if *holder != "" && d.Addressee != *holder && d.Job.Holder != *holder {
			continue
		}
		if *format == "json" {
			fmt.Fprintf(stdout, "%s\n", m.Data())
		} else {
			fmt.Fprintf(tw, "%s\t#%d.%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s/%s\n",
				time.Unix(0, d.At).UTC().Format("15:04:05.000"), d.Cause, d.N, d.Kind, d.Reason,
				d.Job.ID, d.Job.Generation, or(d.Job.Holder, "-"), d.Job.State,
				or(clock(d.Job.ExpiresAt), "-"), d.Role, d.Actor)
			tw.Flush()
		}
		n++
		if *limit > 0 && n >= *limit {
			return nil
		}
	}
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func clock(t int64) string {
	if t == 0 {
		return ""
	}
	return time.Unix(0, t).UTC().Format("15:04:05.000")
}

// runStatus asks every running coordinator (the "tenure" micro service) for
// its status and prints one line each.
func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("status", stderr)
	var conn connFlags
	conn.register(fs, "NATS server (default nats://127.0.0.1:4222, the local embedded one)")
	asJSON := fs.Bool("json", false, "print the raw status objects, one per line")
	wait := fs.Duration("wait", 500*time.Millisecond, "how long to collect answers")
	if err := parse(fs, args); err != nil {
		return err
	}
	defaultURL(&conn)
	nc, err := conn.connect("tenure-status")
	if err != nil {
		return err
	}
	defer nc.Close()
	inbox := nc.NewInbox() // honours --inbox-prefix
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return err
	}
	if err := nc.PublishRequest("$SRV.STATS.tenure", inbox, nil); err != nil {
		return err
	}
	var got []status
	deadline := time.Now().Add(*wait)
	for {
		m, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			break
		}
		var st struct {
			Endpoints []struct {
				Data json.RawMessage `json:"data"`
			} `json:"endpoints"`
		}
		if json.Unmarshal(m.Data, &st) != nil {
			continue
		}
		for _, e := range st.Endpoints {
			var s status
			if json.Unmarshal(e.Data, &s) == nil && s.ID != "" {
				got = append(got, s)
			}
		}
	}
	if len(got) == 0 {
		return errors.New("no coordinator answered (is `tenure serve` running and reachable?)")
	}
	slices.SortFunc(got, func(a, b status) int { return strings.Compare(a.ID, b.ID) })
	if *asJSON {
		for _, s := range got {
			b, _ := json.Marshal(s)
			fmt.Fprintf(stdout, "%s\n", b)
		}
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "COORDINATOR\tROLE\tFOLDED\tSTORED\tLAG\tLEADER\tSNAPSHOT\tLOST-AUTHORITY")
	for _, s := range got {
		role := "standby"
		if s.Live {
			role = "live"
		}
		snap := "-"
		if s.SnapshotSeq > 0 {
			snap = fmt.Sprintf("#%d %s ago", s.SnapshotSeq, time.Since(s.SnapshotAt).Round(time.Second))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%d\n", s.ID, role, s.InputsFolded, s.DecisionsStored, s.Lag, s.Leader, snap, s.LostAuthority)
	}
	return tw.Flush()
}
