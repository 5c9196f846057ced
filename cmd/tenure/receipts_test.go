package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/embedded"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/receipt"
	"github.com/maknow/tenure/streams"
	sdk "github.com/maknow/tenure/worker"
)

// deployment is tenure serve's parts in this process: an embedded server on
// a data directory and a coordinator, until stop.
type deployment struct {
	srv  *embedded.Server
	nc   *nats.Conn
	stop func()
}

func startDeployment(t *testing.T, data string) *deployment {
	t.Helper()
	srv, err := embedded.Start(embedded.Config{DataDir: data, Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		srv.Shutdown()
		t.Fatal(err)
	}
	c, err := coordinator.New(coordinator.Config{ID: "c1", Conn: nc, LeaderTTL: 600 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	if err := testutil.Poll(20*time.Second, func() error {
		if st := c.Stats(); !st.Live {
			return fmt.Errorf("%+v", st)
		}
		return nil
	}); err != nil {
		t.Fatalf("coordinator not live: %v", err)
	}
	d := &deployment{srv: srv, nc: nc}
	var stopped bool
	d.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("coordinator: %v", err)
		}
		nc.Close()
		srv.Shutdown()
	}
	t.Cleanup(d.stop)
	return d
}

// work runs a worker w with receipts kept in file: it acquires, renews and
// completes each job, one after the other, and waits for every verdict.
func work(t *testing.T, d *deployment, w, file string, jobs ...string) {
	t.Helper()
	rf, err := receipt.OpenFile(file)
	if err != nil {
		t.Fatal(err)
	}
	defer rf.Close()
	nc, err := nats.Connect(d.srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	wk, err := sdk.Connect(nc, w, sdk.WithReceipts(rf), sdk.WithErrorHandler(func(err error) { t.Errorf("worker %s: %v", w, err) }))
	if err != nil {
		t.Fatal(err)
	}
	defer wk.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, j := range jobs {
		l, err := wk.Acquire(ctx, j, sdk.WithLeaseDuration(time.Minute))
		if err != nil {
			t.Fatalf("%s acquire %s: %v", w, j, err)
		}
		if err := l.Renew(ctx); err != nil {
			t.Fatalf("%s renew %s: %v", w, j, err)
		}
		if err := l.Complete(ctx, events.OutcomeSuccess, ""); err != nil {
			t.Fatalf("%s complete %s: %v", w, j, err)
		}
	}
}

// copyDir copies a stopped data directory, byte for byte (stored times and
// all), as a backup would.
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		if e.IsDir() {
			return os.MkdirAll(dst, 0o700)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The stored log loses acknowledged writes behind the coordinator's back
// (issue 15): the data directory is put back to an older copy (as storage
// that loses its last writes, or a restore from a backup, does), the
// coordinator carries on, and another worker's inputs and decisions take
// the sequences w1's acknowledged ones had. The log is consistent: a plain
// audit is clean. w1's receipts are not: tenure audit --receipts reports
// every input and decision w1 was told of and the log no longer holds, with
// their sequences, and confirms the rest.
func TestAuditReceiptsCatchALostTail(t *testing.T) {
	dir := t.TempDir()
	data, backup := filepath.Join(dir, "data"), filepath.Join(dir, "backup")
	w1File, w2File := filepath.Join(dir, "w1.receipts"), filepath.Join(dir, "w2.receipts")

	d := startDeployment(t, data)
	work(t, d, "w1", w1File, "a")
	d.stop()
	copyDir(t, data, backup) // the state the storage will fall back to
	before, err := receipt.ReadFile(w1File)
	if err != nil {
		t.Fatal(err)
	}

	d = startDeployment(t, data)
	work(t, d, "w1", w1File, "b") // acknowledged, decided, receipts kept: then lost
	d.stop()
	all, err := receipt.ReadFile(w1File)
	if err != nil {
		t.Fatal(err)
	}
	lost := all[len(before):]
	if len(before) == 0 || len(lost) == 0 {
		t.Fatalf("%d receipts before the copy, %d after", len(before), len(all))
	}

	if err := os.RemoveAll(data); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(backup, data); err != nil {
		t.Fatal(err)
	}
	d = startDeployment(t, data)
	work(t, d, "w2", w2File, "c") // takes the lost sequences
	url := d.srv.ClientURL()

	code, out, errOut := runAuditCmd("--nats-url", url)
	if code != 0 {
		t.Fatalf("plain audit of the rewritten log: exit %d, want a clean log\n%s%s", code, out, errOut)
	}
	code, out, errOut = runAuditCmd("--nats-url", url, "--receipts", w1File, "--receipts", w2File, "--list", "-1")
	if code != 1 {
		t.Fatalf("audit --receipts: exit %d, want 1\n%s%s", code, out, errOut)
	}
	w2, err := receipt.ReadFile(w2File)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("witnesses:   %d given, %d confirmed, %d not borne out by the log", len(all)+len(w2), len(before)+len(w2), len(lost))
	if !strings.Contains(out, want) {
		t.Fatalf("audit --receipts: want %q\n%s", want, out)
	}
	t.Logf("audit --receipts:\n%s", out)
	for _, l := range lost {
		prefix := fmt.Sprintf("  %s: %s %d ", l.Origin(), l.Kind, l.Seq)
		if !strings.Contains(out, prefix) {
			t.Errorf("no finding for the lost %s %d (%s):\n%s", l.Kind, l.Seq, l.Origin(), out)
		}
	}
}

// tenure watch --receipts keeps a receipt of every decision it prints, and
// tenure audit --receipts confirms them all on the same log.
func TestWatchReceipts(t *testing.T) {
	dir := t.TempDir()
	d := startDeployment(t, filepath.Join(dir, "data"))
	work(t, d, "w1", filepath.Join(dir, "w1.receipts"), "a", "b")
	url := d.srv.ClientURL()
	file := filepath.Join(dir, "watch.receipts")
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"watch", "--nats-url", url, "--all", "-n", "6", "--receipts", file}, &out, &errOut); code != 0 {
		t.Fatalf("watch: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	lines, err := receipt.ReadFile(file)
	if err != nil || len(lines) != 6 {
		t.Fatalf("%d receipts, %v", len(lines), err)
	}
	code, aout, aerr := runAuditCmd("--nats-url", url, "--receipts", file, "--receipts", filepath.Join(dir, "w1.receipts"))
	if code != 0 || !strings.Contains(aout, ", 0 not borne out by the log") {
		t.Fatalf("audit --receipts: exit %d\n%s%s", code, aout, aerr)
	}
}

// With quotas (PROTOCOL.md §4.2) a worker's input receipts name its intake
// stream and the sequence there; tenure audit --receipts finds each input
// in the input stream by its Nats-Stream-Source header and confirms them
// all, and a receipt of an intake sequence the log never sourced is a
// finding.
func TestAuditReceiptsOfIntakeInputs(t *testing.T) {
	d := startDeployment(t, t.TempDir())
	js, err := jetstream.New(d.nc)
	if err != nil {
		t.Fatal(err)
	}
	q := streams.Quotas{Workers: []string{"w1"}, MaxBytes: 1 << 20, MaxMsgs: 1000, BytesPerS: 1 << 20, MsgsPerS: 1000}
	if _, err := streams.ApplyQuotas(context.Background(), js, streams.Topology{}, q); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "w1.receipts")
	work(t, d, "w1", file, "a", "b")
	lines, err := receipt.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	intake := 0
	for _, l := range lines {
		if l.Kind == receipt.KindInput {
			if l.Stream != "TENURE_INTAKE_w1" {
				t.Fatalf("input receipt %s names stream %s, want TENURE_INTAKE_w1", l.Origin(), l.Stream)
			}
			intake++
		}
	}
	if intake != 6 {
		t.Fatalf("%d input receipts, want 6 (acquire, renew, result of two jobs)", intake)
	}
	url := d.srv.ClientURL()
	code, out, errOut := runAuditCmd("--nats-url", url, "--receipts", file)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("%d given, %d confirmed, 0 not borne out", len(lines), len(lines))) {
		t.Fatalf("audit --receipts: exit %d, want every receipt confirmed\n%s%s", code, out, errOut)
	}
	// A receipt of an intake input the log does not hold.
	forged := filepath.Join(t.TempDir(), "forged.receipts")
	rf, err := receipt.OpenFile(forged)
	if err != nil {
		t.Fatal(err)
	}
	if err := rf.Keep(receipt.Input("TENURE_INTAKE_w1", 999, "tenure.in.worker.w1.a.acquire", []byte("{}"), "worker w1")); err != nil {
		t.Fatal(err)
	}
	rf.Close()
	if code, out, errOut := runAuditCmd("--nats-url", url, "--receipts", forged); code != 1 || !strings.Contains(out, "input 999 of intake stream TENURE_INTAKE_w1 is not in the input stream") {
		t.Fatalf("audit of a receipt the log does not bear out: exit %d\n%s%s", code, out, errOut)
	}
}
