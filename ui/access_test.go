package ui

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/maknow/tenure/internal/testutil"
)

// secretPayload is the payload of the queue job of secretJob: what a
// submitter might put there, and no viewer may see.
const secretPayload = "db-password-7f3k9q"

// secretJob submits a queue job with a payload, has worker w1 take it
// (an offer ACKed: a live lease) and returns its id and lease id.
func (e *env) secretJob() (job, lease string) {
	e.t.Helper()
	job = "mail-1"
	if _, v := e.decide("ops.disp."+job+".submit", `{"v":1,"queue":"emails","payload":"`+secretPayload+`"}`); v != "submitted/ok" {
		e.t.Fatalf("submit: %s", v)
	}
	e.publish("worker.w1._.pull", `{"v":1,"queue":"emails","slots":1,"ttl_ms":600000}`)
	testutil.WaitFor(e.t, 10*time.Second, job+" offered to w1", func() bool { return e.row(job).State == "OFFERED" })
	lease = e.row(job).LeaseID
	if _, v := e.decide("worker.w1."+job+".ack", `{"v":1,"lease_id":"`+lease+`","generation":1}`); v != "acked/ok" {
		e.t.Fatalf("ack: %s", v)
	}
	// A stale claim too, so that the anomalies feed has an entry about it.
	e.decide("worker.w2."+job+".renew", `{"v":1,"lease_id":"L1-guess","generation":1,"renew_seq":1}`)
	return job, lease
}

// anonymous sends a request with no credential but what set adds (a POST
// with body, an action's by default).
func (e *env) anonymous(method, path string, set func(*http.Request)) (int, string, http.Header) {
	e.t.Helper()
	return e.anonymousBody(method, path, `{"action":"revoke"}`, set)
}

func (e *env) anonymousBody(method, path, body string, set func(*http.Request)) (int, string, http.Header) {
	e.t.Helper()
	req, _ := http.NewRequest(method, e.url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if set != nil {
		set(req)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := client.Do(req.WithContext(ctx))
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && b.Len() < 1<<20 {
		b.WriteString(sc.Text() + "\n")
	}
	return resp.StatusCode, b.String(), resp.Header
}

// Without a credential every endpoint of the board answers 401 and every
// page sends to the login page (303, nothing of the page), whatever else the
// request carries: no cookie, a forged one, a wrong bearer token, a
// well-formed token the board does not know. /healthz, /metrics, the
// login page and its style sheet answer, and carry counts only: no lease
// id, no payload, no job id.
func TestBoardNeedsCredential(t *testing.T) {
	e := newEnv(t, true)
	job, lease := e.secretJob()
	stranger, err := NewToken(Operator)
	if err != nil {
		t.Fatal(err)
	}
	creds := map[string]func(*http.Request){
		"no credential": nil,
		"a forged session cookie": func(r *http.Request) {
			r.AddCookie(&http.Cookie{Name: SessionCookie, Value: "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"})
		},
		"a wrong bearer token":  func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+lease) },
		"another board's token": func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+stranger.String()) },
		"a token as a cookie": func(r *http.Request) {
			r.AddCookie(&http.Cookie{Name: SessionCookie, Value: e.tokens[Operator].String()})
		},
		"a token as basic auth":  func(r *http.Request) { r.SetBasicAuth("operator", e.tokens[Operator].String()) },
		"a same-origin browser":  func(r *http.Request) { r.Header.Set("Origin", e.url); r.Header.Set("Sec-Fetch-Site", "same-origin") },
		"the CSRF token of none": func(r *http.Request) { r.Header.Set(CSRFHeader, e.op.csrf) },
	}
	pages := []string{"/", "/jobs/" + job, "/jobs/" + job + "?gen=1", "/anomalies", "/audit", "/nope"}
	gets := []string{
		"/api/config", "/api/jobs", "/api/jobs?state=LIVE", "/api/jobs/" + job, "/api/jobs/" + job + "?after=1",
		"/api/anomalies", "/api/queues", "/api/audit", "/api/events?watch=" + job + "&job=" + job + "&feed=0",
		"/assets/app.js", "/assets/index.html",
	}
	posts := []string{"/api/jobs/" + job + "/action", "/api/queues/q/dead", "/api/audit", "/logout"}
	for name, set := range creds {
		for _, p := range gets {
			code, body, hdr := e.anonymous(http.MethodGet, p, set)
			if code != http.StatusUnauthorized {
				t.Errorf("GET %s with %s: %d, want 401\n%.300s", p, name, code, body)
			}
			if strings.Contains(body, lease) || strings.Contains(body, secretPayload) {
				t.Errorf("GET %s with %s: the answer has the lease id or the payload:\n%.300s", p, name, body)
			}
			if code == http.StatusUnauthorized && !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("GET %s with %s: 401 without a Bearer challenge", p, name)
			}
		}
		for _, p := range pages {
			code, body, hdr := e.anonymous(http.MethodGet, p, set)
			if code != http.StatusSeeOther || hdr.Get("Location") != "/login?next="+url.QueryEscape(p) {
				t.Errorf("GET %s with %s: %d to %q, want 303 to the login page\n%.300s", p, name, code, hdr.Get("Location"), body)
			}
			if strings.Contains(body, lease) || strings.Contains(body, secretPayload) {
				t.Errorf("GET %s with %s: the answer has the lease id or the payload:\n%.300s", p, name, body)
			}
		}
		for _, p := range posts {
			if code, body, _ := e.anonymous(http.MethodPost, p, set); code != http.StatusUnauthorized {
				t.Errorf("POST %s with %s: %d, want 401\n%.300s", p, name, code, body)
			}
		}
	}
	// The login page it sends a person to comes back to the page.
	if _, body, _ := e.anonymous(http.MethodGet, "/login?next="+url.QueryEscape("/jobs/"+job), nil); !strings.Contains(body, `<form method="post" action="/login"`) || !strings.Contains(body, `value="/jobs/`+job+`"`) {
		t.Errorf("the login page does not lead back to the page:\n%s", body)
	}
	if r := e.row(job); r.CancelRequested || r.State != "ACTIVE" || r.Generation != 1 {
		t.Fatalf("%s after the refused requests: %+v", job, r)
	}

	// Open, and counts only.
	for _, p := range []string{"/healthz", "/metrics", "/login", "/assets/style.css", "/assets/favicon.svg"} {
		code, body, _ := e.anonymous(http.MethodGet, p, nil)
		if code != http.StatusOK {
			t.Errorf("GET %s without a credential: %d, want 200", p, code)
		}
		for _, secret := range []string{lease, secretPayload, job, "w1"} {
			if strings.Contains(body, secret) {
				t.Errorf("GET %s without a credential carries %q:\n%s", p, secret, body)
			}
		}
	}
	if _, body, _ := e.anonymous(http.MethodGet, "/metrics", nil); !strings.Contains(body, "tenure_active_leases 1") || !strings.Contains(body, `tenure_jobs{state="ACTIVE"} 1`) {
		t.Errorf("/metrics lacks the counts:\n%s", body)
	}
}

// A viewer's session (or bearer token) sees no lease id and no payload
// anywhere: the board, the job page (decisions, matrix, inputs), the
// anomalies, the queues, the live updates; audits and actions are the
// operator's. An operator's session sees both.
func TestViewerSeesNoLeaseNorPayload(t *testing.T) {
	e := newEnv(t, true)
	job, lease := e.secretJob()
	viewer := e.login(Viewer)
	bearer := func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+e.tokens[Viewer].String()) }
	paths := []string{"/api/config", "/api/jobs", "/api/jobs?state=LIVE&sort=deadline", "/api/jobs/" + job, "/api/jobs/" + job + "?after=1", "/api/anomalies", "/api/queues"}
	for _, p := range paths {
		code, body := viewer.raw(p)
		bcode, bbody, _ := e.anonymous(http.MethodGet, p, bearer)
		for who, got := range map[string]string{"viewer session": body, "viewer bearer token": bbody} {
			if code != http.StatusOK || bcode != http.StatusOK {
				t.Fatalf("GET %s: %d (session), %d (bearer)", p, code, bcode)
			}
			if strings.Contains(got, lease) || strings.Contains(got, secretPayload) {
				t.Errorf("GET %s as a %s: the lease id or the payload is there:\n%s", p, who, got)
			}
		}
	}
	// The live updates: the first frames of a page watching the job.
	events := e.sse(viewer, "/api/events?watch="+job+"&job="+job+"&feed=0", "board", "job")
	if strings.Contains(events, lease) || strings.Contains(events, secretPayload) || !strings.Contains(events, `"id":"`+job+`"`) {
		t.Errorf("the viewer's live updates:\n%s", events)
	}
	// What the viewer's job page still shows: every decision, its
	// generation, holder and states, the lease id and payload hidden.
	var vh, oh History
	viewer.get("/api/jobs/"+job, &vh)
	e.get("/api/jobs/"+job, &oh)
	if !vh.Redacted || oh.Redacted || len(vh.Decisions) != len(oh.Decisions) || len(vh.Inputs) != len(oh.Inputs) || vh.Row.Holder != "w1" || vh.Row.Generation != 1 || vh.Row.LeaseID != "" {
		t.Fatalf("viewer's job page: %+v\noperator's: %+v", vh, oh)
	}
	for i, d := range vh.Decisions {
		if d.Generation != oh.Decisions[i].Generation || d.Kind != oh.Decisions[i].Kind || d.Generation > 0 && d.Matrix[1] != Hidden {
			t.Errorf("viewer's decision %d: %+v", i, d)
		}
	}
	for _, in := range vh.Inputs {
		if in.Body != "" || in.LeaseID != "" || !in.Redacted || in.Verb == "" {
			t.Errorf("viewer's input: %+v", in)
		}
	}
	// Audits and actions are the operator's.
	for _, c := range []struct{ method, path string }{{http.MethodGet, "/api/audit"}, {http.MethodPost, "/api/audit"}, {http.MethodPost, "/api/jobs/" + job + "/action"}} {
		var code int
		if c.method == http.MethodGet {
			code, _ = viewer.raw(c.path)
		} else {
			code = viewer.post(c.path, ActionRequest{Action: "revoke"}, nil)
		}
		if code != http.StatusForbidden {
			t.Errorf("%s %s as a viewer: %d, want 403", c.method, c.path, code)
		}
	}
	var vc uiConfig
	if viewer.get("/api/config", &vc); vc.Role != Viewer || vc.Actions {
		t.Errorf("viewer's config: %+v", vc)
	}
	if r := e.row(job); r.State != "ACTIVE" || r.CancelRequested {
		t.Fatalf("%s after the viewer's requests: %+v", job, r)
	}

	// The operator sees both.
	for _, p := range []string{"/api/jobs", "/api/jobs/" + job} {
		if _, body := e.op.raw(p); !strings.Contains(body, lease) {
			t.Errorf("GET %s as the operator: no lease id", p)
		}
	}
	if _, body := e.op.raw("/api/jobs/" + job); !strings.Contains(body, secretPayload) {
		t.Errorf("GET /api/jobs/%s as the operator: no payload", job)
	}
	if events := e.sse(e.op, "/api/events?watch="+job+"&job="+job, "board", "job"); !strings.Contains(events, lease) {
		t.Errorf("the operator's live updates lack the lease id:\n%s", events)
	}
}

// sse opens path on c's session and returns its frames up to the events
// named in want (the first frames: the current state of what it watches).
func (e *env) sse(c *client, path string, want ...string) string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.url+path, nil)
	resp, err := c.hc.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("GET %s: %d", path, resp.StatusCode)
	}
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for len(want) > 0 && sc.Scan() {
		line := sc.Text()
		b.WriteString(line + "\n")
		if name, ok := strings.CutPrefix(line, "event: "); ok && name == want[0] {
			want = want[1:]
			if sc.Scan() { // its data
				b.WriteString(sc.Text() + "\n")
			}
		}
	}
	if len(want) > 0 {
		e.t.Fatalf("GET %s: no %v event in\n%s", path, want, b.String())
	}
	return b.String()
}

// Cross-site requests are refused and change nothing: another site's
// Origin (with the right CSRF token), Sec-Fetch-Site cross-site, a POST
// with the session cookie but neither Origin nor CSRF token, one with a
// wrong CSRF token or another session's; a login from another site, or
// with no Origin at all. The page's own POST works, and so does a bearer
// token without a cookie (a program, not a browser).
func TestCrossSiteRefused(t *testing.T) {
	e := newEnv(t, true)
	e.decide("worker.w1.j1.acquire", `{"v":1,"lease_ms":600000}`)
	row := e.row("j1")
	body := `{"action":"cancel","lease_id":"` + row.LeaseID + `","generation":1,"reason":"forged"}`
	other := e.login(Operator)
	inputs := func() uint64 {
		s, err := e.js.Stream(context.Background(), "TENURE_IN")
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return info.State.LastSeq
	}
	before := inputs()
	for name, set := range map[string]func(*http.Request){
		"another site's Origin": func(r *http.Request) {
			r.Header.Set("Origin", "http://evil.example")
			r.Header.Set(CSRFHeader, e.op.csrf)
		},
		"another port's Origin": func(r *http.Request) {
			r.Header.Set("Origin", "http://127.0.0.1:1")
			r.Header.Set(CSRFHeader, e.op.csrf)
		},
		"a null Origin": func(r *http.Request) { r.Header.Set("Origin", "null"); r.Header.Set(CSRFHeader, e.op.csrf) },
		"Sec-Fetch-Site cross-site": func(r *http.Request) {
			r.Header.Set("Sec-Fetch-Site", "cross-site")
			r.Header.Set(CSRFHeader, e.op.csrf)
		},
		"Sec-Fetch-Site same-site": func(r *http.Request) {
			r.Header.Set("Sec-Fetch-Site", "same-site")
			r.Header.Set(CSRFHeader, e.op.csrf)
		},
		"no Origin, no CSRF token":  nil,
		"no Origin, its CSRF token": func(r *http.Request) { r.Header.Set(CSRFHeader, e.op.csrf) },
		"its Origin, no CSRF token": func(r *http.Request) { r.Header.Set("Origin", e.url) },
		"a wrong CSRF token": func(r *http.Request) {
			// Its first character changed: "x" unless it is one (a random
			// token starts with "x" once in 64, and the test then sent the
			// right token).
			c := "x"
			if e.op.csrf[0] == 'x' {
				c = "y"
			}
			r.Header.Set("Origin", e.url)
			r.Header.Set(CSRFHeader, c+e.op.csrf[1:])
		},
		"another session's token":   func(r *http.Request) { r.Header.Set("Origin", e.url); r.Header.Set(CSRFHeader, other.csrf) },
		"a bearer token and cookie": func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+e.tokens[Operator].String()) },
		"the bearer, another Origin": func(r *http.Request) {
			r.Header.Set("Authorization", "Bearer "+e.tokens[Operator].String())
			r.Header.Set("Origin", "http://evil.example")
		},
	} {
		req, _ := http.NewRequest(http.MethodPost, e.url+"/api/jobs/j1/action", strings.NewReader(body))
		req.Header.Set("Content-Type", "text/plain") // what a form of another site may send
		if set != nil {
			set(req)
		}
		c := e.op.hc // with the operator's session cookie
		if strings.HasPrefix(name, "the bearer") {
			c = http.DefaultClient // no cookie
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("POST with %s: %d, want 403", name, resp.StatusCode)
		}
	}
	if r := e.row("j1"); r.CancelRequested || r.State != "ACTIVE" {
		t.Fatalf("j1 after the refused requests: %+v", r)
	}
	if n := inputs(); n != before {
		t.Fatalf("the refused requests stored %d inputs", n-before)
	}

	// A login from another site, or without Origin, is refused too: no
	// other site may log a browser in with a token of its choosing.
	for name, set := range map[string]func(*http.Request){
		"another site's Origin": func(r *http.Request) { r.Header.Set("Origin", "http://evil.example") },
		"no Origin":             nil,
	} {
		form := url.Values{"token": {e.tokens[Operator].String()}}
		code, _, hdr := e.anonymousBody(http.MethodPost, "/login", form.Encode(), func(r *http.Request) {
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			if set != nil {
				set(r)
			}
		})
		if code != http.StatusForbidden || len(hdr.Values("Set-Cookie")) > 0 {
			t.Errorf("login with %s: %d %v, want 403 and no cookie", name, code, hdr.Values("Set-Cookie"))
		}
	}

	// The page's own request works.
	var res ActionResult
	if code := e.op.post("/api/jobs/j1/action", ActionRequest{Action: "cancel", LeaseID: row.LeaseID, Generation: 1, Reason: "from the page"}, &res); code != http.StatusOK || res.Kind != "cancel_requested" {
		t.Fatalf("the page's own cancel: %d %+v", code, res)
	}
	// A program's bearer token, without a cookie, needs no CSRF token.
	req, _ := http.NewRequest(http.MethodPost, e.url+"/api/jobs/j1/action", strings.NewReader(`{"action":"cancel"}`))
	req.Header.Set("Authorization", "Bearer "+e.tokens[Operator].String())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var dup ActionResult
	_ = json.NewDecoder(resp.Body).Decode(&dup)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || dup.Kind != "duplicate" {
		t.Fatalf("a bearer token's cancel: %d %+v", resp.StatusCode, dup)
	}
}

// Token files: made with mode 0600 and 256 random bits, read back, never
// replaced; a file others may read, or that holds no token, is refused.
func TestTokenFiles(t *testing.T) {
	dir := t.TempDir()
	toks, made, err := EnsureTokenFiles(dir)
	if err != nil || len(toks) != 2 || len(made) != 2 || toks[0].Role != Operator || toks[1].Role != Viewer {
		t.Fatalf("EnsureTokenFiles: %v %v %v", toks, made, err)
	}
	again, made2, err := EnsureTokenFiles(dir)
	if err != nil || len(made2) != 0 || again[0].String() != toks[0].String() || again[1].String() != toks[1].String() {
		t.Fatalf("EnsureTokenFiles again: %v %v", made2, err)
	}
	for _, f := range []string{OperatorTokenFile, ViewerTokenFile} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v", f, fi.Mode(), err)
		}
	}
	if len(toks[0].String()) != len("tenure_operator_")+43 || toks[0].String() == toks[1].String() {
		t.Errorf("tokens %q %q", toks[0], toks[1])
	}
	if err := WriteTokenFile(filepath.Join(dir, OperatorTokenFile), toks[1]); !errors.Is(err, fs.ErrExist) {
		t.Errorf("WriteTokenFile over a token: %v", err)
	}
	loose := filepath.Join(dir, "loose.token")
	if err := os.WriteFile(loose, []byte(toks[0].String()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadTokenFile(loose); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a token file others may read: %v", err)
	}
	for _, bad := range []string{"", "tenure_admin_" + toks[0].String()[16:], "tenure_operator_short", toks[0].String() + "x", "Bearer " + toks[0].String()} {
		if _, err := ParseToken(bad); !errors.Is(err, ErrBadToken) {
			t.Errorf("ParseToken(%q): %v", bad, err)
		}
	}
	if _, err := New(Config{Conn: nil}); err == nil {
		t.Error("New without a connection")
	}
}

// A session ends with its TTL, and with its logout (its cookie then opens
// nothing, even replayed); a board without tokens is refused.
func TestSessionEnds(t *testing.T) {
	e := newEnv(t, false)
	c := e.login(Viewer)
	if code, _ := c.raw("/api/jobs"); code != http.StatusOK {
		t.Fatalf("a fresh session: %d", code)
	}
	e.ui.access.setNow(func() time.Time { return time.Now().Add(DefaultSessionTTL + time.Minute) })
	if code, _ := c.raw("/api/jobs"); code != http.StatusUnauthorized {
		t.Fatalf("a session past its TTL: %d, want 401", code)
	}
	e.ui.access.setNow(time.Now)
	c = e.login(Operator)
	u, _ := url.Parse(e.url)
	cookies := c.hc.Jar.Cookies(u)
	if code := c.post("/logout", struct{}{}, nil); code != http.StatusOK {
		t.Fatalf("logout: %d", code)
	}
	replay, _ := http.NewRequest(http.MethodGet, e.url+"/api/jobs", nil)
	for _, ck := range cookies {
		replay.AddCookie(ck)
	}
	resp, err := http.DefaultClient.Do(replay)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the cookie of a session logged out: %d, want 401", resp.StatusCode)
	}
	if _, err := New(Config{Conn: e.nc}); err == nil || !strings.Contains(err.Error(), "no board token") {
		t.Errorf("New without tokens: %v", err)
	}
}

// secretDetail is the detail of a failed result: a worker's free text,
// which may hold what a payload holds.
const secretDetail = "auth failed for user billing (token sk-77q2)"

// The worker's detail of a FAILED result (issue 34) is an operator's to
// see, like a payload: on the board, the job page and the live updates;
// never a viewer's (session or bearer token), anywhere.
func TestResultDetailNeedToKnow(t *testing.T) {
	e := newEnv(t, true)
	const job = "fail-9"
	_, v := e.decide("worker.w1."+job+".acquire", `{"v":1}`)
	if v != "granted/ok" {
		t.Fatalf("acquire: %s", v)
	}
	lease := e.row(job).LeaseID
	if _, v := e.decide("worker.w1."+job+".result", `{"v":1,"lease_id":"`+lease+`","generation":1,"outcome":"FAILED","detail":"`+secretDetail+`"}`); v != "completed/ok" {
		t.Fatalf("result: %s", v)
	}
	viewer := e.login(Viewer)
	bearer := func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+e.tokens[Viewer].String()) }
	for _, p := range []string{"/api/jobs", "/api/jobs?state=FAILED", "/api/jobs/" + job, "/api/anomalies"} {
		_, body := viewer.raw(p)
		_, bbody, _ := e.anonymous(http.MethodGet, p, bearer)
		if strings.Contains(body, secretDetail) || strings.Contains(bbody, secretDetail) || strings.Contains(body, "sk-77q2") {
			t.Errorf("GET %s as a viewer: the result's detail is there:\n%s", p, body)
		}
	}
	if ev := e.sse(viewer, "/api/events?watch="+job+"&job="+job, "board", "job"); strings.Contains(ev, secretDetail) {
		t.Errorf("the viewer's live updates carry the detail:\n%s", ev)
	}
	var page Page
	e.get("/api/jobs?state=FAILED", &page)
	if len(page.Rows) != 1 || page.Rows[0].ResultDetail != secretDetail || page.Rows[0].LastOutcome != "FAILED" {
		t.Errorf("the operator's board: %+v", page.Rows)
	}
	var h History
	e.get("/api/jobs/"+job, &h)
	if h.Row.ResultDetail != secretDetail || h.Row.ResultInput == 0 {
		t.Errorf("the operator's job page: %+v", h.Row)
	}
	if ev := e.sse(e.op, "/api/events?watch="+job+"&job="+job, "board", "job"); !strings.Contains(ev, secretDetail) {
		t.Errorf("the operator's live updates lack the detail:\n%s", ev)
	}
}

// The actions on jobs that need an operator (issue 34: retry and discard
// of a DEAD queue job, settle of an UNRESOLVED one) are guarded as every
// action is: a viewer (session or bearer token) gets 403, and so does an
// operator's browser session sending a request another site could forge
// (another Origin, a cross-site fetch, no or a wrong CSRF token); nothing
// is published. The page's own requests, and an operator's bearer token,
// work.
func TestOperatorTasksGuarded(t *testing.T) {
	e := newEnv(t, true)
	e.deadAndUnresolved()
	viewer := e.login(Viewer)
	inputs := func() uint64 {
		s, err := e.js.Stream(context.Background(), "TENURE_IN")
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return info.State.LastSeq
	}
	before := inputs()
	actions := []struct {
		job  string
		body ActionRequest
	}{
		{"mail-d", ActionRequest{Action: "retry"}},
		{"mail-e", ActionRequest{Action: "discard"}},
		{"sync-u", ActionRequest{Action: "settle", Outcome: "CANCELLED"}},
	}
	for _, a := range actions {
		path := "/api/jobs/" + a.job + "/action"
		body, _ := json.Marshal(a.body)
		if code := viewer.post(path, a.body, nil); code != http.StatusForbidden {
			t.Errorf("%s %s as a viewer's session: %d, want 403", a.body.Action, a.job, code)
		}
		code, _, _ := e.anonymousBody(http.MethodPost, path, string(body), func(r *http.Request) {
			r.Header.Set("Authorization", "Bearer "+e.tokens[Viewer].String())
		})
		if code != http.StatusForbidden {
			t.Errorf("%s %s with a viewer's bearer token: %d, want 403", a.body.Action, a.job, code)
		}
		for name, set := range map[string]func(*http.Request){
			"another site's Origin": func(r *http.Request) {
				r.Header.Set("Origin", "http://evil.example")
				r.Header.Set(CSRFHeader, e.op.csrf)
			},
			"Sec-Fetch-Site cross-site": func(r *http.Request) {
				r.Header.Set("Sec-Fetch-Site", "cross-site")
				r.Header.Set(CSRFHeader, e.op.csrf)
			},
			"its Origin, no CSRF token": func(r *http.Request) { r.Header.Set("Origin", e.url) },
			"another session's token":   func(r *http.Request) { r.Header.Set("Origin", e.url); r.Header.Set(CSRFHeader, viewer.csrf) },
			"no Origin, no CSRF token":  nil,
		} {
			req, _ := http.NewRequest(http.MethodPost, e.url+path, strings.NewReader(string(body)))
			req.Header.Set("Content-Type", "text/plain") // what a form of another site may send
			if set != nil {
				set(req)
			}
			resp, err := e.op.hc.Do(req) // with the operator's session cookie
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden {
				t.Errorf("%s %s with %s: %d, want 403", a.body.Action, a.job, name, resp.StatusCode)
			}
		}
	}
	if n := inputs(); n != before {
		t.Fatalf("the refused requests stored %d inputs", n-before)
	}
	for job, st := range map[string]string{"mail-d": "DEAD", "mail-e": "DEAD", "sync-u": "UNRESOLVED"} {
		if r := e.row(job); r.State != st {
			t.Fatalf("%s after the refused requests: %s, want %s", job, r.State, st)
		}
	}
	// The page's own requests work; so does an operator's bearer token.
	for _, a := range actions[:2] {
		var res ActionResult
		if code := e.op.post("/api/jobs/"+a.job+"/action", a.body, &res); code != http.StatusOK || !res.Accepted || res.Kind != "resolved" {
			t.Errorf("the page's own %s of %s: %d %+v", a.body.Action, a.job, code, res)
		}
	}
	code, body, _ := e.anonymousBody(http.MethodPost, "/api/jobs/sync-u/action", `{"action":"settle","outcome":"CANCELLED"}`, func(r *http.Request) {
		r.Header.Set("Authorization", "Bearer "+e.tokens[Operator].String())
	})
	if code != http.StatusOK || !strings.Contains(body, `"kind":"resolved"`) {
		t.Errorf("an operator's bearer token settling sync-u: %d %s", code, body)
	}
}
