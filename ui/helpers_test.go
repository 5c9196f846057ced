package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/maknow/tenure/coordinator"
	"github.com/maknow/tenure/embedded"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/internal/testutil"
)

// env is a real Tenure for a test: an embedded nats-server, a live
// coordinator (with the UI's metrics hook) and the UI server on a real
// loopback port (so that a browser can reach it).
type env struct {
	t       testing.TB
	srv     *embedded.Server
	nc      *nats.Conn
	js      jetstream.JetStream
	coord   *coordinator.Coordinator
	metrics *Metrics
	ui      *Server
	url     string // http://127.0.0.1:port
	tokens  map[BoardRole]Token
	op      *client // the operator's session, logged in through the login page: what e.get and e.post use
}

// testTokens makes a token of each role.
func testTokens(t testing.TB) map[BoardRole]Token {
	t.Helper()
	out := make(map[BoardRole]Token)
	for _, role := range []BoardRole{Operator, Viewer} {
		tok, err := NewToken(role)
		if err != nil {
			t.Fatal(err)
		}
		out[role] = tok
	}
	return out
}

// serve starts the UI server of cfg (with the env's tokens) on a real
// loopback port until ctx ends, and logs the operator in.
func (e *env) serve(ctx context.Context, wg *sync.WaitGroup, cfg Config) {
	e.t.Helper()
	e.tokens = testTokens(e.t)
	cfg.Tokens = []Token{e.tokens[Operator], e.tokens[Viewer]}
	u, err := New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.ui = u
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		e.t.Fatal(err)
	}
	e.url = "http://" + ln.Addr().String()
	wg.Go(func() { _ = u.Serve(ctx, ln) })
	e.op = e.login(Operator)
}

// client is a browser's session of the board: a cookie jar holding the
// session cookie the login page set, and the session's CSRF token.
type client struct {
	e    *env
	hc   *http.Client
	csrf string
	role BoardRole
}

// login logs in with the token of role through the login form, as a
// browser does (its Origin is the board's), and reads the session's CSRF
// token from /api/config.
func (e *env) login(role BoardRole) *client {
	e.t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &client{e: e, hc: &http.Client{Jar: jar}, role: role}
	form := url.Values{"token": {e.tokens[role].String()}, "next": {"/"}}
	req, _ := http.NewRequest(http.MethodPost, e.url+"/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", e.url)
	resp, err := c.hc.Do(req)
	if err != nil {
		e.t.Fatalf("login: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/" {
		e.t.Fatalf("login as %s: %d at %s", role, resp.StatusCode, resp.Request.URL)
	}
	var cfg uiConfig
	if code := c.get("/api/config", &cfg); code != http.StatusOK || cfg.Role != role || cfg.CSRF == "" {
		e.t.Fatalf("config after the login as %s: %d %+v", role, code, cfg)
	}
	c.csrf = cfg.CSRF
	return c
}

// do sends req on the session and returns its status and body.
func (c *client) do(req *http.Request) (int, []byte) {
	c.e.t.Helper()
	resp, err := c.hc.Do(req)
	if err != nil {
		c.e.t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// get fetches path on the session and decodes its JSON into v (if not nil).
func (c *client) get(path string, v any) int {
	c.e.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, c.e.url+path, nil)
	code, b := c.do(req)
	if v != nil && len(b) > 0 {
		if err := json.Unmarshal(b, v); err != nil {
			c.e.t.Fatalf("GET %s: %v\n%s", path, err, b)
		}
	}
	return code
}

// raw fetches path on the session: its status and body.
func (c *client) raw(path string) (int, string) {
	c.e.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, c.e.url+path, nil)
	code, b := c.do(req)
	return code, string(b)
}

// post sends body as JSON to path, as the UI's own pages do (Origin and
// the CSRF token), and decodes the answer.
func (c *client) post(path string, body any, v any) int {
	c.e.t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, c.e.url+path, strings.NewReader(string(b)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", c.e.url)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.Header.Set(CSRFHeader, c.csrf)
	code, rb := c.do(req)
	if v != nil && len(rb) > 0 {
		if err := json.Unmarshal(rb, v); err != nil {
			c.e.t.Fatalf("POST %s: %v\n%s", path, err, rb)
		}
	}
	return code
}

func newEnv(t testing.TB, actions bool) *env {
	t.Helper()
	srv := testutil.StartServer(t)
	nc, js := testutil.Connect(t, srv.ClientURL())
	e := &env{t: t, srv: srv, nc: nc, js: js, metrics: NewMetrics()}
	c, err := coordinator.New(coordinator.Config{ID: "c1", Conn: nc, Metrics: e.metrics, LeaderTTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	e.coord = c
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = c.Run(ctx) })
	status := func(ctx context.Context) ([]CoordinatorStatus, error) {
		st := CoordinatorStatus{Stats: c.Stats(), Leader: "c1"}
		if s, err := js.Stream(ctx, "TENURE_IN"); err == nil {
			if info, err := s.Info(ctx); err == nil {
				st.InputStreamSeq = info.State.LastSeq
				st.Lag = st.InputStreamSeq - min(st.InputStreamSeq, st.InputsFolded)
			}
		}
		return []CoordinatorStatus{st}, nil
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	e.serve(ctx, &wg, Config{Conn: nc, Status: status, Metrics: e.metrics, Actions: actions, FlushInterval: 50 * time.Millisecond})
	testutil.WaitFor(e.t, 20*time.Second, "the coordinator to go live", func() bool { return c.Stats().Live })
	return e
}

// publish stores one input (subject without "tenure.in.") and returns its sequence.
func (e *env) publish(subject, body string) uint64 {
	e.t.Helper()
	ack, err := e.js.Publish(context.Background(), events.InputPrefix+"."+subject, []byte(body))
	if err != nil {
		e.t.Fatalf("publish %s: %v", subject, err)
	}
	return ack.Sequence
}

// decide publishes an input and waits until the UI's read model holds its
// verdicts; it returns the kind/reason of the verdict about job.
func (e *env) decide(subject, body string) (seq uint64, verdict string) {
	e.t.Helper()
	seq = e.publish(subject, body)
	parts := strings.Split(subject, ".")
	job := parts[2]
	testutil.WaitFor(e.t, 15*time.Second, fmt.Sprintf("the verdict on input %d", seq), func() bool {
		row, _, _, ok := e.ui.model.job(job, 0)
		if ok && row.LastCause >= seq {
			verdict = row.LastKind + "/" + row.LastReason
			return true
		}
		return false
	})
	return seq, verdict
}

// get fetches path as the operator's session and decodes its JSON into v
// (if not nil).
func (e *env) get(path string, v any) int {
	e.t.Helper()
	return e.op.get(path, v)
}

// post sends body as JSON to path as the operator's page does, and decodes
// the answer.
func (e *env) post(path string, body any, v any) int {
	e.t.Helper()
	return e.op.post(path, body, v)
}

// row is job's row in the UI's read model (it fails the test if there is none).
func (e *env) row(job string) Row {
	e.t.Helper()
	r, _, _, ok := e.ui.model.job(job, 0)
	if !ok {
		e.t.Fatalf("no job %s in the read model", job)
	}
	return r
}
