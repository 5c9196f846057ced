package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/maknow/tenure/auth"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/ui"
	sdk "github.com/maknow/tenure/worker"
)

func runAuthCmd(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(context.Background(), append([]string{"auth"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

// Bad flags and names are usage errors (exit status 2) and write nothing.
func TestAuthInitUsage(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "out")
	for _, args := range [][]string{
		{},
		{"bogus"},
		{"init"},
		{"init", "--out", dir, "--worker", "w.1"},
		{"init", "--out", dir, "--worker", "w 1"},
		{"init", "--out", dir, "--worker", "w*"},
		{"init", "--out", dir, "--worker", "_"},
		{"init", "--out", dir, "--worker", "w1,,w2"},
		{"init", "--out", dir, "--worker", strings.Repeat("w", 65)},
		{"init", "--out", dir, "--dispatcher", "a>b"},
		{"init", "--out", dir, "--operators", "op.1"},
		{"init", "--out", dir, "--coordinators", ""},
		{"init", "--out", dir, "--workers", "-1"},
		{"init", "--out", dir, "--workers", "10001"},
		{"init", "--out", dir, "--workers", "2", "--worker", "x"},
		{"init", "--out", dir, "--dispatchers", "2", "--dispatcher", "x"},
		{"init", "--out", dir, "--worker", "x", "--dispatcher", "x"},
		{"init", "--out", dir, "--workers", "1", "--worker", "w1", "--coordinators", "w1"},
		{"init", "--out", dir, "--workers", "2", "--tls-hosts", "example.com"},
		{"init", "--out", dir, "--workers", "2", "--stream-prefix", "A.B"},
		{"init", "--out", dir, "--workers", "2", "--bcrypt-cost", "99"},
		{"init", "--out", dir, "--workers", "2", "extra"},
		{"init", "--out", dir, "--no-such-flag"},
	} {
		code, _, stderr := runAuthCmd(args...)
		if code != 2 {
			t.Errorf("tenure auth %q: exit %d, want 2 (stderr %q)", args, code, stderr)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("tenure auth %q wrote %s", args, dir)
		}
	}
	for _, args := range [][]string{{"-h"}, {"init", "-h"}} {
		if code, _, _ := runAuthCmd(args...); code != 0 {
			t.Errorf("tenure auth %q: exit %d, want 0", args, code)
		}
	}
}

// The files are written with mode 0600; a second run refuses to overwrite
// them (exit 1, nothing changed) unless --force.
func TestAuthInitFiles(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "auth")
	args := []string{"init", "--out", dir, "--workers", "2", "--dispatcher", "disp", "--operators", "op1,op2", "--nkeys", "--tls", "--bcrypt-cost", "4"}
	code, stdout, stderr := runAuthCmd(args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := []string{"server.conf", "quotas.json", "ca.pem", "ca-key.pem", "server-cert.pem", "server-key.pem", "board-operator.token", "board-viewer.token"}
	for _, n := range []string{"admin", "coord", "disp", "op1", "op2", "board", "w1", "w2"} {
		want = append(want, n+".creds.json", n+".nk", n+".cert.pem", n+".key.pem")
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != len(want) {
		t.Errorf("%d files, want %d", len(ents), len(want))
	}
	for _, n := range want {
		fi, err := os.Stat(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", n, fi.Mode().Perm())
		}
	}
	for _, s := range []string{
		"tenure serve --server-config " + filepath.Join(dir, "server.conf") + " --id coord --creds-json " + filepath.Join(dir, "coord.creds.json") + "\n",
		"tenure genesis --creds-json " + filepath.Join(dir, "admin.creds.json") + "\n",
		"tenure offer --as disp ",
		"subscribe allow: _INBOX_w1.> tenure.heads tenure.heads.*\n", // and the chain heads its account imports
		"account:         TENURE_W_w1, of its own",
		"JS.TENURE.API.CONSUMER.CREATE.TENURE_OUT.tw_w1_{0..3}.tenure.out.w1.>",
		"What the server enforces",
		"--ui-token-file " + filepath.Join(dir, "board-operator.token") + " --ui-token-file " + filepath.Join(dir, "board-viewer.token") + "\n",
		"--ui-actions --ui-credential " + filepath.Join(dir, "board.creds.json") + "\n",
	} {
		if !strings.Contains(stdout, s) {
			t.Errorf("summary without %q:\n%s", s, stdout)
		}
	}
	for _, role := range []ui.BoardRole{ui.Operator, ui.Viewer} {
		if tok, err := ui.ReadTokenFile(filepath.Join(dir, ui.TokenFile(role))); err != nil || tok.Role != role {
			t.Errorf("%s token file: %v %v", role, tok.Role, err)
		} else if strings.Contains(stdout, tok.String()) {
			t.Errorf("the summary prints the %s token", role)
		}
	}
	conf, _ := os.ReadFile(filepath.Join(dir, "server.conf"))

	code, _, stderr = runAuthCmd(args...)
	if code != 1 || !strings.Contains(stderr, "--force") {
		t.Fatalf("second run: exit %d, stderr %q; want 1 and a hint at --force", code, stderr)
	}
	if now, _ := os.ReadFile(filepath.Join(dir, "server.conf")); !bytes.Equal(now, conf) {
		t.Fatal("a refused run changed server.conf")
	}
	code, _, stderr = runAuthCmd(append(args, "--force")...)
	if code != 0 {
		t.Fatalf("forced run: exit %d: %s", code, stderr)
	}
	if now, _ := os.ReadFile(filepath.Join(dir, "server.conf")); bytes.Equal(now, conf) {
		t.Fatal("--force did not regenerate server.conf")
	}
}

// `tenure serve --server-config` runs the embedded server with a generated
// configuration (TLS with client certificates, bcrypt passwords), and
// connects its own coordinator with the coordinator's credentials and inbox
// prefix. A dispatcher then offers through `tenure offer`, a worker accepts
// and renews through the SDK with its credential, and the server refuses
// the worker speaking for another.
func TestAuthServe(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if code, _, stderr := runAuthCmd("init", "--out", dir, "--worker", "w1,w2", "--dispatcher", "disp", "--tls", "--bcrypt-cost", "4"); code != 0 {
		t.Fatalf("auth init: exit %d: %s", code, stderr)
	}
	cred := func(name string) auth.Credential {
		c, err := auth.ReadCredential(filepath.Join(dir, name+".creds.json"))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	disp, w1c := cred("disp"), cred("w1")
	flags := func(c auth.Credential) []string {
		return []string{"--creds-json", filepath.Join(dir, c.Name+".creds.json")}
	}
	coord := cred("coord")

	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		args := append([]string{"serve", "--data", t.TempDir(), "--listen", "127.0.0.1:-1", "--sync", "interval",
			"--id", "coord", "--server-config", filepath.Join(dir, "server.conf")}, flags(coord)...)
		done <- run(ctx, args, &bytes.Buffer{}, &logs)
	}()
	url := waitServing(t, &logs, done, regexp.MustCompile(`connect workers to ((?:nats|tls)://127\.0\.0\.1:\d+)`))
	runGenesisAs(t, dir, url)

	// The dispatcher asks the coordinator's status service (the coordinator
	// answers on the dispatcher's own inbox: allow_responses).
	dnc, err := disp.Connect(url, nats.Timeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer dnc.Close()
	if err := testutil.Poll(30*time.Second, func() error { return statusLive(dnc, "tenure.status.coord") }); err != nil {
		t.Fatalf("coordinator not live: %v\n%s", err, logs.String())
	}
	if resp, err := dnc.Request("$SRV.PING.tenure", nil, 5*time.Second); err != nil || !strings.Contains(string(resp.Data), "tenure") {
		t.Fatalf("$SRV.PING.tenure: %v", err)
	}

	var violations []error
	var mu sync.Mutex
	wnc, err := w1c.Connect(url, nats.Timeout(20*time.Second), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		mu.Lock()
		violations = append(violations, err)
		mu.Unlock()
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer wnc.Close()
	w1, err := sdk.Connect(wnc, "w1", sdk.WithErrorHandler(func(err error) { sdkError(t, "w1", err) }))
	if err != nil {
		t.Fatal(err)
	}
	defer w1.Close()

	var out, errb bytes.Buffer
	offer := append([]string{"offer", "--as", "disp", "--nats-url", url, "--job", "auth-1", "--holder", "w1", "--json"}, flags(disp)...)
	if code := run(ctx, offer, &out, &errb); code != 0 {
		t.Fatalf("tenure offer as disp: exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), `"kind":"offered"`) {
		t.Fatalf("offer verdict: %s", out.String())
	}
	// tenure policy show reads the policy in force with a dispatcher's
	// permissions (a direct get of the last policy_set decision).
	out.Reset()
	if code := run(ctx, append([]string{"policy", "show", "--as", "disp", "--nats-url", url}, flags(disp)...), &out, &errb); code != 0 || !strings.Contains(out.String(), "set by input 2 at ") {
		t.Fatalf("tenure policy show as disp: exit %d: %s%s", code, out.String(), errb.String())
	}
	var o sdk.Offer
	select {
	case o = <-w1.Offers():
	case <-time.After(10 * time.Second):
		t.Fatal("w1: no offer")
	}
	l, err := o.Accept(ctx, sdk.WithLeaseDuration(time.Minute))
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	if err := l.Complete(ctx, events.OutcomeSuccess, ""); err != nil {
		t.Fatal(err)
	}
	// A lease of 3 s renewed at 0.3 of it: a renewal's verdict has 2 s to
	// come back (with 900 ms, 600 ms was too short on two loaded cores).
	l2, err := w1.Acquire(ctx, "auth-2", sdk.WithLeaseDuration(3*time.Second), sdk.WithRenewFraction(0.3))
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	first := l2.Expires()
	// Time must pass here: past the lease of 3 s, which only renewals keep
	// (the test proves they do, and that nothing ends the lease).
	time.Sleep(3500 * time.Millisecond)
	if l2.Context().Err() != nil || !l2.Expires().After(first) {
		t.Fatalf("lease not renewed: %v", context.Cause(l2.Context()))
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(violations) != 0 {
		t.Errorf("w1's connection: %v", violations)
	}
	mu.Unlock()

	// Speaking for w2: refused by the server.
	if err := wnc.Publish("tenure.in.worker.w2.auth-2.acquire", []byte(`{"v":1}`)); err != nil {
		t.Fatal(err)
	}
	_ = wnc.Flush()
	testutil.WaitFor(t, 10*time.Second, "the permissions violation of w1 publishing as w2", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(violations) > 0
	})
	mu.Lock()
	if !errors.Is(violations[0], nats.ErrPermissionViolation) {
		t.Errorf("w1 publishing as w2: %v", violations[0])
	}
	violations = nil
	mu.Unlock()

	// The state API: the dispatcher reads auth-1's projection (tenure jobs
	// get), the worker is refused by the server (a projection carries
	// lease ids).
	if err := testutil.Poll(10*time.Second, func() error {
		out.Reset()
		errb.Reset()
		if code := run(ctx, append([]string{"jobs", "get", "auth-1", "--nats-url", url}, flags(disp)...), &out, &errb); code != 0 {
			return fmt.Errorf("exit %d: %s", code, errb.String())
		}
		return nil
	}); err != nil || !strings.Contains(out.String(), `"state": "COMPLETED"`) {
		t.Fatalf("tenure jobs get auth-1 as disp: %v\n%s", err, out.String())
	}
	if m, err := wnc.Request("tenure.api.job.get", []byte(`{"job":"auth-1"}`), time.Second); err == nil {
		t.Fatalf("w1's request on the state API was answered: %s", m.Data)
	}
	testutil.WaitFor(t, 10*time.Second, "the permissions violation of w1 requesting the state API", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(violations) > 0 && errors.Is(violations[0], nats.ErrPermissionViolation) && strings.Contains(violations[0].Error(), "tenure.api.job.get")
	})

	_ = w1.Close()
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("serve exit %d:\n%s", code, logs.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop")
	}
	if s := logs.String(); strings.Contains(s, "ermission") {
		t.Errorf("serve logged a permissions problem:\n%s", s)
	}
}

// `tenure auth init --partitions 4` writes a configuration that `tenure
// serve --partitions 4 --server-config` runs (the file's input mapping and
// the embedded server's own one together); every coordinator answers its
// status endpoint, tenure status and tenure offer work as the dispatcher,
// and a worker acquires, renews and completes leases in every partition
// through the SDK, with no permissions violation anywhere. Without
// --partitions nothing of it is in the file.
func TestAuthServePartitioned(t *testing.T) {
	t.Parallel()
	const count = 4
	if code, _, _ := runAuthCmd("init", "--out", filepath.Join(t.TempDir(), "x"), "--workers", "1", "--partitions", "1025"); code != 2 {
		t.Errorf("--partitions 1025: exit %d, want 2", code)
	}
	plain := t.TempDir()
	if code, stdout, stderr := runAuthCmd("init", "--out", plain, "--workers", "1", "--bcrypt-cost", "4"); code != 0 {
		t.Fatalf("auth init: exit %d: %s", code, stderr)
	} else if strings.Contains(stdout, "--partitions") || strings.Contains(stdout, "_P0_") {
		t.Errorf("unpartitioned summary mentions partitions:\n%s", stdout)
	}
	if conf, _ := os.ReadFile(filepath.Join(plain, "server.conf")); strings.Contains(string(conf), "mappings") || strings.Contains(string(conf), "_P0_") {
		t.Errorf("unpartitioned server.conf:\n%s", conf)
	}

	dir := t.TempDir()
	code, summary, stderr := runAuthCmd("init", "--out", dir, "--worker", "w1,w2", "--dispatcher", "disp", "--partitions", fmt.Sprint(count), "--bcrypt-cost", "4")
	if code != 0 {
		t.Fatalf("auth init: exit %d: %s", code, stderr)
	}
	for _, s := range []string{" --creds-json " + filepath.Join(dir, "coord.creds.json") + " --partitions 4\n", "TENURE_P0_OUT", "TENURE_P0_ to TENURE_P3_"} {
		if !strings.Contains(summary, s) {
			t.Errorf("summary without %q:\n%s", s, summary)
		}
	}
	if strings.Contains(summary, "TENURE_P1_") {
		t.Errorf("summary lists every partition's subjects:\n%s", summary)
	}
	cred := func(name string) auth.Credential {
		c, err := auth.ReadCredential(filepath.Join(dir, name+".creds.json"))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	coord, disp, w1c := cred("coord"), cred("disp"), cred("w1")
	flags := func(c auth.Credential) []string {
		return []string{"--creds-json", filepath.Join(dir, c.Name+".creds.json")}
	}

	// A configuration generated for another count is refused at start-up.
	for _, other := range []string{"2", "0"} {
		var stderr bytes.Buffer
		args := append([]string{"serve", "--data", t.TempDir(), "--listen", "127.0.0.1:-1", "--sync", "interval",
			"--id", "coord", "--partitions", other, "--server-config", filepath.Join(dir, "server.conf")}, flags(coord)...)
		if code := run(context.Background(), args, &bytes.Buffer{}, &stderr); code != 2 || !strings.Contains(stderr.String(), "is for 4 partitions") {
			t.Errorf("serve --partitions %s with a 4-partition server.conf: exit %d, want 2 and the counts named:\n%s", other, code, stderr.String())
		}
	}

	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		args := append([]string{"serve", "--data", t.TempDir(), "--listen", "127.0.0.1:-1", "--sync", "interval",
			"--id", "coord", "--partitions", fmt.Sprint(count), "--leader-ttl", "1s", "--server-config", filepath.Join(dir, "server.conf")}, flags(coord)...)
		done <- run(ctx, args, &bytes.Buffer{}, &logs)
	}()
	url := waitServing(t, &logs, done, regexp.MustCompile(`connect workers to (nats://127\.0\.0\.1:\d+)`))
	runGenesisAs(t, dir, url)

	var mu sync.Mutex
	var violations []error
	onErr := nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		mu.Lock()
		violations = append(violations, err)
		mu.Unlock()
	})
	dnc, err := disp.Connect(url, nats.Timeout(20*time.Second), onErr)
	if err != nil {
		t.Fatal(err)
	}
	defer dnc.Close()
	ready := 0 // partitions 0 to ready-1 said they are live
	if err := testutil.Poll(30*time.Second, func() error {
		for ; ready < count; ready++ {
			if err := statusLive(dnc, fmt.Sprintf("tenure.status.coord.%d", ready)); err != nil {
				return fmt.Errorf("partition %d not live: %w", ready, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("%v\n%s", err, logs.String())
	}
	var out, errb bytes.Buffer
	if code := run(ctx, append([]string{"status", "--nats-url", url}, flags(disp)...), &out, &errb); code != 0 || strings.Contains(out.String(), "no live coordinator") {
		t.Errorf("tenure status as disp: exit %d: %s%s", code, out.String(), errb.String())
	}

	wnc, err := w1c.Connect(url, nats.Timeout(20*time.Second), onErr)
	if err != nil {
		t.Fatal(err)
	}
	defer wnc.Close()
	w1, err := sdk.Connect(wnc, "w1", sdk.WithErrorHandler(func(err error) { sdkError(t, "w1", err) }))
	if err != nil {
		t.Fatal(err)
	}
	defer w1.Close()
	covered := map[uint32]bool{}
	for i := 0; len(covered) < count; i++ {
		job := fmt.Sprintf("pauth-%d", i)
		k := events.PartitionOf(job, count)
		if covered[k] {
			continue
		}
		covered[k] = true
		l, err := w1.Acquire(ctx, job, sdk.WithLeaseDuration(time.Minute))
		if err != nil {
			t.Fatalf("acquire %s (partition %d): %v", job, k, err)
		}
		if err := l.Renew(ctx); err != nil {
			t.Fatalf("renew %s: %v", job, err)
		}
		if err := l.Complete(ctx, events.OutcomeSuccess, ""); err != nil {
			t.Fatalf("complete %s: %v", job, err)
		}
	}
	out.Reset()
	errb.Reset()
	offer := append([]string{"offer", "--as", "disp", "--nats-url", url, "--job", "pauth-offer", "--holder", "w1", "--json"}, flags(disp)...)
	if code := run(ctx, offer, &out, &errb); code != 0 || !strings.Contains(out.String(), `"kind":"offered"`) {
		t.Fatalf("tenure offer as disp: exit %d: %s%s", code, out.String(), errb.String())
	}
	select {
	case o := <-w1.Offers():
		l, err := o.Accept(ctx)
		if err != nil {
			t.Fatalf("accept: %v", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("w1: no offer")
	}
	_ = w1.Close()
	// A violation is the server's -ERR on the connection, sent before its
	// answer to any later PING: once a flush returns, the client has read
	// every violation of what it sent before (and kept the last as its
	// LastError; the ErrorHandler hears of it later, on another goroutine).
	for _, nc := range []*nats.Conn{wnc, dnc} {
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := nc.LastError(); errors.Is(err, nats.ErrPermissionViolation) {
			t.Errorf("client connection %s: %v", nc.Opts.Name, err)
		}
	}
	mu.Lock()
	if len(violations) != 0 {
		t.Errorf("client connections: %v", violations)
	}
	mu.Unlock()

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("serve exit %d:\n%s", code, logs.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop")
	}
	if s := logs.String(); strings.Contains(s, "ermission") {
		t.Errorf("serve logged a permissions problem:\n%s", s)
	}
}

// boardSession logs in to the board at web with token, as a browser does
// (the login form, its Origin), and returns the session's client and CSRF
// token.
func boardSession(t *testing.T, web, token string) (*http.Client, string) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	req, _ := http.NewRequest(http.MethodPost, web+"/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", web)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	req, _ = http.NewRequest(http.MethodGet, web+"/api/config", nil)
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var cfg struct {
		Role    string `json:"role"`
		CSRF    string `json:"csrf"`
		Actions bool   `json:"actions"`
		Actor   string `json:"actor"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&cfg); err != nil || cfg.Role != "operator" || cfg.CSRF == "" || !cfg.Actions || cfg.Actor != "board" {
		t.Fatalf("the board's config after the login: %d %+v %v", resp.StatusCode, cfg, err)
	}
	return c, cfg.CSRF
}

// `tenure serve --http --ui-actions` under `tenure auth init`'s
// configuration, with the board's tokens and its ops user's credential as
// the summary says: an operator logged in to the board cancels a worker's
// lease from it. The action is an input of ops user board (whose
// permissions allow it; the coordinator's user may publish no ops input),
// accepted, and nothing anywhere logs a permissions problem.
func TestAuthServeUIActions(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if code, _, stderr := runAuthCmd("init", "--out", dir, "--worker", "w1", "--bcrypt-cost", "4"); code != 0 {
		t.Fatalf("auth init: exit %d: %s", code, stderr)
	}
	w1c, err := auth.ReadCredential(filepath.Join(dir, "w1.creds.json"))
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		args := []string{"serve", "--data", t.TempDir(), "--listen", "127.0.0.1:-1", "--sync", "interval",
			"--id", "coord", "--server-config", filepath.Join(dir, "server.conf"),
			"--credential", filepath.Join(dir, "coord.creds.json"),
			"--http", "127.0.0.1:0", "--ui-token-file", filepath.Join(dir, "board-operator.token"), "--ui-token-file", filepath.Join(dir, "board-viewer.token"),
			"--ui-actions", "--ui-credential", filepath.Join(dir, "board.creds.json")}
		done <- run(ctx, args, &bytes.Buffer{}, &logs)
	}()
	natsURL := waitServing(t, &logs, done, regexp.MustCompile(`connect workers to (nats://127\.0\.0\.1:\d+)`))
	web := waitServing(t, &logs, done, regexp.MustCompile(`web UI on (http://127\.0\.0\.1:\d+)/`))
	runGenesisAs(t, dir, natsURL) // a brand-new deployment: the administrator ends its genesis

	// The coordinator live first (the board's ops user may ask it).
	boardCred, err := auth.ReadCredential(filepath.Join(dir, "board.creds.json"))
	if err != nil {
		t.Fatal(err)
	}
	bnc, err := boardCred.Connect(natsURL, nats.Timeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer bnc.Close()
	if err := testutil.Poll(30*time.Second, func() error { return statusLive(bnc, "tenure.status.coord") }); err != nil {
		t.Fatalf("coordinator not live: %v\n%s", err, logs.String())
	}
	wnc, err := w1c.Connect(natsURL, nats.Timeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer wnc.Close()
	w1, err := sdk.Connect(wnc, "w1")
	if err != nil {
		t.Fatal(err)
	}
	defer w1.Close()
	var l *sdk.Lease
	if err := testutil.Poll(30*time.Second, func() error {
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		defer acancel()
		l, err = w1.Acquire(actx, "ui-1", sdk.WithLeaseDuration(10*time.Minute))
		return err
	}); err != nil {
		t.Fatalf("acquire: %v\n%s", err, logs.String())
	}

	tok, err := ui.ReadTokenFile(filepath.Join(dir, "board-operator.token"))
	if err != nil {
		t.Fatal(err)
	}
	c, csrf := boardSession(t, web, tok.String())
	body := fmt.Sprintf(`{"action":"cancel","lease_id":%q,"generation":%d,"reason":"from the board"}`, l.Token().LeaseID, l.Token().Generation)
	req, _ := http.NewRequest(http.MethodPost, web+"/api/jobs/ui-1/action", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", web)
	req.Header.Set(ui.CSRFHeader, csrf)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var res ui.ActionResult
	_ = json.Unmarshal(b, &res)
	if resp.StatusCode != http.StatusOK || !res.Accepted || res.Kind != "cancel_requested" {
		t.Fatalf("the board's cancel: %d %s\n%s", resp.StatusCode, b, logs.String())
	}
	// The worker's lease is asked to stop: the cancellation reached it.
	select {
	case <-l.CancelRequested():
	case <-time.After(10 * time.Second):
		t.Fatal("w1 was not told of the cancellation")
	}
	// The input is ops user board's (once the board's read model has it).
	var hist ui.History
	if err := testutil.Poll(10*time.Second, func() error {
		hist = ui.History{}
		req, _ := http.NewRequest(http.MethodGet, web+"/api/jobs/ui-1", nil)
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(&hist); err != nil || !hist.Row.CancelRequested {
			return fmt.Errorf("%d %v: %+v", resp.StatusCode, err, hist.Row)
		}
		return nil
	}); err != nil {
		t.Fatalf("the job on the board after its cancel: %v", err)
	}
	if n := len(hist.Inputs); n == 0 || hist.Inputs[n-1].Subject != "tenure.in.ops.board.ui-1.cancel" {
		t.Fatalf("the board's cancel's input: %+v", hist.Inputs)
	}

	_ = w1.Close()
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("serve exit %d:\n%s", code, logs.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop")
	}
	if s := logs.String(); strings.Contains(s, "ermission") {
		t.Errorf("serve logged a permissions problem:\n%s", s)
	}
}

// runGenesisAs runs `tenure genesis` with the administrator's credential of
// the tenure auth init in dir against url: the first start of a brand-new
// deployment.
func runGenesisAs(t *testing.T, dir, url string) {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"genesis", "--credential", filepath.Join(dir, "admin.creds.json"), "--nats-url", url, "--timeout", "30s"}, &out, &errb); code != 0 {
		t.Fatalf("tenure genesis: exit %d: %s%s", code, out.String(), errb.String())
	}
}

// printedRun returns the command lines of tenure auth init's summary that
// start with "tenure <command> " (as printed, after the indentation), in
// order, split into arguments.
func printedRun(summary, command string) [][]string {
	var out [][]string
	for _, line := range strings.Split(summary, "\n") {
		if l := strings.TrimSpace(line); strings.HasPrefix(l, "tenure "+command+" ") {
			out = append(out, strings.Fields(l)[1:])
		}
	}
	return out
}

// A brand-new deployment under tenure auth init goes live by the printed
// instructions, run as printed (only the embedded server's data directory,
// port and sync mode added, and the server's URL for the commands that
// connect to it): the first start's serve waits, saying so, for the
// administrator's tenure genesis, which widens the input stream; the
// coordinator then goes live without a restart, and the printed dispatcher
// line offers. A later start, by the "every later start" line on the same
// data directory, goes live by itself. No printed line holds a password
// (ps shows a command line to every local user).
func TestAuthPrintedRunLines(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	code, summary, stderr := runAuthCmd("init", "--out", dir, "--worker", "w1", "--dispatcher", "disp", "--tls", "--bcrypt-cost", "4")
	if code != 0 {
		t.Fatalf("auth init: exit %d: %s", code, stderr)
	}
	for _, name := range []string{"admin", "coord", "disp", "w1"} {
		c, err := auth.ReadCredential(filepath.Join(dir, name+".creds.json"))
		if err != nil {
			t.Fatal(err)
		}
		if c.Password == "" || strings.Contains(summary, c.Password) {
			t.Fatalf("%s's password (%d characters) printed in the summary:\n%s", name, len(c.Password), summary)
		}
	}
	serves, geneses, offers := printedRun(summary, "serve"), printedRun(summary, "genesis"), printedRun(summary, "offer")
	if len(serves) != 2 || !slices.Equal(serves[0], serves[1]) || len(geneses) != 1 || len(offers) != 1 {
		t.Fatalf("want the first start's serve and genesis, the later starts' serve and an offer; got serve %q, genesis %q, offer %q in:\n%s", serves, geneses, offers, summary)
	}
	for _, l := range append(append(slices.Clone(serves), geneses...), offers...) {
		if slices.Contains(l, "--password") {
			t.Fatalf("a printed line takes --password: %q", l)
		}
	}
	data := t.TempDir()
	serve := func(ctx context.Context, logs *syncBuffer) (url string, done chan int) {
		done = make(chan int, 1)
		go func() {
			done <- run(ctx, append(slices.Clone(serves[0]), "--data", data, "--listen", "127.0.0.1:-1", "--sync", "interval"), &bytes.Buffer{}, logs)
		}()
		return waitServing(t, logs, done, regexp.MustCompile(`connect workers to (tls://127\.0\.0\.1:\d+)`)), done
	}
	stop := func(cancel context.CancelFunc, done chan int, logs *syncBuffer) {
		t.Helper()
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Fatalf("serve exit %d:\n%s", code, logs.String())
			}
		case <-time.After(20 * time.Second):
			t.Fatal("serve did not stop")
		}
		if s := logs.String(); strings.Contains(s, "ermission") || strings.Contains(s, "iolation") {
			t.Errorf("serve logged a permissions problem:\n%s", s)
		}
	}
	disp, err := auth.ReadCredential(filepath.Join(dir, "disp.creds.json"))
	if err != nil {
		t.Fatal(err)
	}

	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url, done := serve(ctx, &logs)
	dnc, err := disp.Connect(url, nats.Timeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer dnc.Close()
	// Standby, naming the command to run (as printed), until it runs.
	if err := testutil.Poll(30*time.Second, func() error {
		st, err := coordinatorStatus(dnc, "tenure.status.coord")
		if err != nil {
			return err
		}
		if st.State != "standby" || !strings.Contains(st.Reason, strings.Join(append([]string{"tenure"}, geneses[0]...), " ")) {
			return fmt.Errorf("state %s, reason %q", st.State, st.Reason)
		}
		return nil
	}); err != nil {
		t.Fatalf("coordinator not waiting for tenure genesis: %v\n%s", err, logs.String())
	}
	var out, errb bytes.Buffer
	if code := run(ctx, append(slices.Clone(geneses[0]), "--nats-url", url, "--timeout", "30s"), &out, &errb); code != 0 || !strings.Contains(out.String(), "TENURE_IN: genesis ended") {
		t.Fatalf("tenure genesis as printed: exit %d: %s%s", code, out.String(), errb.String())
	}
	if err := testutil.Poll(30*time.Second, func() error { return statusLive(dnc, "tenure.status.coord") }); err != nil {
		t.Fatalf("coordinator not live after tenure genesis: %v\n%s", err, logs.String())
	}
	offer := func(ctx context.Context, job string) {
		t.Helper()
		var out, errb bytes.Buffer
		args := slices.Clone(offers[0])
		for i, a := range args {
			args[i] = strings.NewReplacer("JOB", job, "WORKER", "w1").Replace(a)
		}
		if code := run(ctx, append(args, "--nats-url", url, "--json"), &out, &errb); code != 0 || !strings.Contains(out.String(), `"kind":"offered"`) {
			t.Fatalf("tenure offer %q: exit %d: %s%s", args, code, out.String(), errb.String())
		}
	}
	offer(ctx, "printed-1")
	// The printed genesis applied the quotas: tenure status says so.
	for i, a := range offers[0] {
		if a != "--creds-json" || i+1 == len(offers[0]) {
			continue
		}
		// (The coordinator finds an intake stream created after it went
		// live within a second.)
		var out, errb bytes.Buffer
		if err := testutil.Poll(10*time.Second, func() error {
			out.Reset()
			errb.Reset()
			if code := run(ctx, []string{"status", "--creds-json", offers[0][i+1], "--nats-url", url}, &out, &errb); code != 0 || !strings.Contains(out.String(), "coord storage: ") || !strings.Contains(out.String(), "; 1 intake streams") {
				return fmt.Errorf("exit %d", code)
			}
			return nil
		}); err != nil {
			t.Errorf("tenure status: %v, want the coordinator's storage with 1 intake stream:\n%s%s", err, out.String(), errb.String())
		}
	}
	dnc.Close()
	stop(cancel, done, &logs)

	// A later start: live by itself.
	var logs2 syncBuffer
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	url, done = serve(ctx2, &logs2)
	dnc, err = disp.Connect(url, nats.Timeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer dnc.Close()
	if err := testutil.Poll(30*time.Second, func() error { return statusLive(dnc, "tenure.status.coord") }); err != nil {
		t.Fatalf("coordinator not live on a later start: %v\n%s", err, logs2.String())
	}
	offer(ctx2, "printed-2")
	stop(cancel2, done, &logs2)
}

// coordinatorStatus asks a coordinator's status service for its status.
func coordinatorStatus(nc *nats.Conn, subject string) (status, error) {
	var st status
	resp, err := nc.Request(subject, nil, time.Second)
	if err != nil {
		return st, fmt.Errorf("%s: %w", subject, err)
	}
	if err := json.Unmarshal(resp.Data, &st); err != nil {
		return st, fmt.Errorf("%s: %w", subject, err)
	}
	return st, nil
}
