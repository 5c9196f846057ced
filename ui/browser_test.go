package ui

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/maknow/tenure/audit"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/projector"
	"github.com/maknow/tenure/worker"
)

// chromium finds the headless browser: $TENURE_CHROMIUM, else Debian's
// chromium (`apt-get install -y chromium`, which .ci/run does) or another
// Chrome on the PATH (the Makefile's test target looks for the same names).
func chromium() (string, error) {
	if p := os.Getenv("TENURE_CHROMIUM"); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			return "", fmt.Errorf("TENURE_CHROMIUM=%s: %w", p, err)
		}
		return p, nil
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no chromium, chromium-browser or google-chrome on the PATH")
}

// requireBrowser is the environment variable that makes a missing browser
// a failure rather than a skip; .ci/run sets it to 1, so that CI cannot
// silently skip the browser tests.
const requireBrowser = "TENURE_REQUIRE_BROWSER"

// noBrowser decides what a browser test does when chromium() found no
// browser (lookup is its error), given $TENURE_REQUIRE_BROWSER (require)
// and $TENURE_CHROMIUM (named): it skips, saying what to install, unless
// the browser is required (require is "1"), or was named and is not there,
// or require is neither "", "0" nor "1" (a misspelt value must not turn
// CI's requirement into a skip); then it fails.
func noBrowser(lookup error, require, named string) (fail bool, msg string) {
	install := "install it with `apt-get install chromium` (.ci/run does), or set TENURE_CHROMIUM to a Chrome or Chromium"
	switch {
	case require != "" && require != "0" && require != "1":
		return true, fmt.Sprintf("%s=%q: want 1 (a missing browser fails the test) or 0 (it skips it)", requireBrowser, require)
	case named != "":
		return true, fmt.Sprintf("the browser tests of the web board need a headless Chromium: %v", lookup)
	case require == "1":
		return true, fmt.Sprintf("the browser tests of the web board need a headless Chromium (%s=1): %v; %s", requireBrowser, lookup, install)
	}
	return false, fmt.Sprintf("SKIPPED: the browser tests of the web board need a headless Chromium: %v; %s (with %s=1 its absence fails)", lookup, install, requireBrowser)
}

// browser starts a headless Chromium with a fresh profile and no background
// networking (the machine's network is closed), and returns its context.
// Without a browser the test is skipped or fails: noBrowser decides.
func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := chromium()
	if err != nil {
		fail, msg := noBrowser(err, os.Getenv(requireBrowser), os.Getenv("TENURE_CHROMIUM"))
		if fail {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1360, 900),
	)
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); acancel() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	return ctx
}

// tab is one browser tab on the UI, collecting the page's uncaught
// exceptions and error messages.
type tab struct {
	t     *testing.T
	ctx   context.Context
	close context.CancelFunc // closes the tab
	name  string
	mu    sync.Mutex
	errs  []string
}

func newTab(t *testing.T, parent context.Context, name string) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(parent)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1360, 900)); err != nil {
		t.Fatal(err)
	}
	tb := &tab{t: t, ctx: ctx, close: cancel, name: name}
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.IsException() || m.Type == chromedp.ConsoleError {
				tb.mu.Lock()
				tb.errs = append(tb.errs, m.String())
				tb.mu.Unlock()
			}
		}
	}()
	return tb
}

func (tb *tab) do(actions ...chromedp.Action[chromedp.Void]) {
	tb.t.Helper()
	if err := chromedp.Do(tb.ctx, actions...); err != nil {
		tb.t.Fatalf("%s tab: %v\npage: %s", tb.name, err, tb.text())
	}
}

// text is the visible text of the page's main part, for failure messages.
func (tb *tab) text() string {
	ctx, cancel := context.WithTimeout(tb.ctx, 3*time.Second)
	defer cancel()
	s, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.querySelector('main')||document.body).innerText`))
	if len(s) > 3000 {
		s = s[:3000] + "…"
	}
	return s
}

// wait polls a JavaScript predicate until it is truthy (within 20 s).
func (tb *tab) wait(what, predicate string) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 25*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](predicate,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		tb.t.Fatalf("%s tab: waiting for %s: %v\npage: %s", tb.name, what, err, tb.text())
	}
}

// settle is wait for a predicate across a navigation (a form's answer, a
// redirect): one that ends the page under the poll is polled again.
func (tb *tab) settle(what, predicate string) {
	tb.t.Helper()
	if err := testutil.Poll(20*time.Second, func() error {
		ok, err := chromedp.Run(tb.ctx, chromedp.Evaluate[bool](predicate))
		if err == nil && !ok {
			err = errors.New("not yet")
		}
		return err
	}); err != nil {
		tb.t.Fatalf("%s tab: waiting for %s: %v\npage: %s", tb.name, what, err, tb.text())
	}
}

func eval[T any](tb *tab, expr string) T {
	tb.t.Helper()
	v, err := chromedp.Run(tb.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		tb.t.Fatalf("%s tab: evaluate %s: %v", tb.name, expr, err)
	}
	return v
}

// mark sets a variable in the page; notReloaded checks it is still there,
// which proves that the page was updated in place, not loaded again.
func (tb *tab) mark() { tb.do(chromedp.Evaluate[chromedp.Void](`window.__tenureMark = 'kept'`)) }

func (tb *tab) notReloaded() {
	tb.t.Helper()
	if got := eval[string](tb, `String(window.__tenureMark)`); got != "kept" {
		tb.t.Fatalf("%s tab was reloaded (mark %q)", tb.name, got)
	}
}

// expectConsole takes out of the console's errors, once, one that
// contains what: an error the test caused on purpose.
func (tb *tab) expectConsole(what string) {
	tb.t.Helper()
	tb.mu.Lock()
	defer tb.mu.Unlock()
	for i, e := range tb.errs {
		if strings.Contains(e, what) {
			tb.errs = slices.Delete(tb.errs, i, i+1)
			return
		}
	}
	tb.t.Errorf("%s tab: no console error with %q (%q)", tb.name, what, tb.errs)
}

func (tb *tab) checkConsole() {
	tb.t.Helper()
	tb.mu.Lock()
	defer tb.mu.Unlock()
	for _, e := range tb.errs {
		tb.t.Errorf("%s tab: console: %s", tb.name, e)
	}
}

// screenshot writes a PNG of the tab to docs/screenshots/name when
// TENURE_SCREENSHOTS=1 (README.md shows them; CI leaves the tree alone).
func (tb *tab) screenshot(name string, full bool) {
	tb.t.Helper()
	if os.Getenv("TENURE_SCREENSHOTS") != "1" {
		return
	}
	tb.do(chromedp.Evaluate[chromedp.Void](`document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0)`), chromedp.Sleep(300*time.Millisecond))
	act := chromedp.CaptureScreenshot()
	if full {
		act = chromedp.FullScreenshot(100)
	}
	png, err := chromedp.Run(tb.ctx, act)
	if err != nil {
		tb.t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join("..", "docs", "screenshots", name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		tb.t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		tb.t.Fatal(err)
	}
	tb.t.Logf("wrote %s (%d bytes)", path, len(png))
}

// login logs the browser of bctx in to e's board with the token of role,
// through the login page as a person does (tabs of one browser share its
// cookies), and returns the tab, on the board.
func (e *env) browserLogin(bctx context.Context, role BoardRole) *tab {
	e.t.Helper()
	tb := newTab(e.t.(*testing.T), bctx, "login")
	tb.do(chromedp.Navigate(e.url + "/"))
	tb.wait("the login form", `document.querySelector('#login-form') !== null`)
	tb.do(chromedp.SendKeys(chromedp.CSS("#token"), e.tokens[role].String()), chromedp.Click(chromedp.CSS("#login-submit")))
	tb.settle("the board after the login as "+string(role), `location.pathname === '/' && (w => w !== null && w.textContent === '`+string(role)+`')(document.querySelector('#who'))`)
	return tb
}

var secsRE = regexp.MustCompile(`^(?:(\d+)m )?(\d+(?:\.\d)?)s$`)

// seconds parses the board's time-left text ("29.3s", "45s", "4m 05s").
func seconds(t *testing.T, s string) float64 {
	t.Helper()
	m := secsRE.FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("time left %q is not a duration", s)
	}
	v, _ := strconv.ParseFloat(m[2], 64)
	if m[1] != "" {
		mins, _ := strconv.Atoi(m[1])
		v += float64(mins * 60)
	}
	return v
}

// background gives the board some company: jobs in various states (12
// rows on the board with report-42), and a typo that is none of them.
func (e *env) background() {
	e.decide("ops.disp.export-7.offer", `{"v":1,"holder":"w3","lease_ms":300000,"ack_timeout_ms":600000}`)
	e.decide("worker.w2.thumbs-3.acquire", `{"v":1,"lease_ms":300000}`)
	l := e.row("thumbs-3").LeaseID
	e.decide("worker.w2.thumbs-3.progress", `{"v":1,"lease_id":"`+l+`","generation":1,"progress_seq":2,"value":60}`)
	e.decide("worker.w2.thumbs-3.progress", `{"v":1,"lease_id":"`+l+`","generation":1,"progress_seq":1,"value":30}`)
	e.decide("worker.w2.thumbs-3.renew", `{"v":1,"lease_id":"`+l+`","generation":1,"renew_seq":1}`)
	e.decide("worker.w4.index-9.acquire", `{"v":1,"lease_ms":120000}`)
	l = e.row("index-9").LeaseID
	e.decide("worker.w4.index-9.progress", `{"v":1,"lease_id":"`+l+`","generation":1,"progress_seq":1,"value":100}`)
	e.decide("worker.w4.index-9.result", `{"v":1,"lease_id":"`+l+`","generation":1,"outcome":"SUCCESS"}`)
	e.decide("worker.w6.mail-5.acquire", `{"v":1,"lease_ms":600000}`)
	e.decide("ops.disp.mail-5.cancel", `{"v":1,"reason":"customer withdrew"}`)
	e.decide("worker.w7.clone-2.acquire", `{"v":1,"lease_ms":900000}`)
	l = e.row("clone-2").LeaseID
	e.decide("worker.w8.clone-2.renew", `{"v":1,"lease_id":"`+l+`","generation":1,"renew_seq":1}`)
	e.decide("worker.w5.ping-1.acquire", `{"v":1,"lease_ms":100}`)
	for i, lease := range []int{90, 240, 420, 180, 600} {
		job := fmt.Sprintf("batch-%d", []int{1, 2, 9, 10, 11}[i]) // in natural order on the board
		e.decide("worker.w9."+job+".acquire", fmt.Sprintf(`{"v":1,"lease_ms":%d000}`, lease))
		l = e.row(job).LeaseID
		e.decide("worker.w9."+job+".progress", fmt.Sprintf(`{"v":1,"lease_id":"%s","generation":1,"progress_seq":1,"value":%d}`, l, 15+i*17))
	}
	// A typo: a job that never had a lease, in the anomalies feed, not on the board.
	e.decide("worker.w2.thumb-3.renew", `{"v":1,"lease_id":"`+e.row("thumbs-3").LeaseID+`","generation":1,"renew_seq":2}`)
	testutil.WaitFor(e.t, 10*time.Second, "ping-1 to expire", func() bool { return e.row("ping-1").State == "EXPIRED" })
}

// End to end in a real headless browser: the board shows a lease granted by
// a worker and counts its time down; a stale renewal appears in the
// anomalies feed and on the job page's timeline, without a reload; the job
// page's evidence matrix is the one `tenure audit --job` prints; the audit
// page runs an audit.
func TestBrowser(t *testing.T) {
	start := time.Now()
	bctx := browser(t)
	e := newEnv(t, false)
	e.browserLogin(bctx, Operator)
	e.background()

	board := newTab(t, bctx, "board")
	board.do(chromedp.Navigate(e.url + "/"))
	board.wait("the board", `document.querySelectorAll('#board-rows tr[data-job]').length >= 10`)
	board.mark()

	// A worker acquires a lease through the SDK: the board shows it.
	w1, err := worker.Connect(e.nc, "w1")
	if err != nil {
		t.Fatal(err)
	}
	defer w1.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	l, err := w1.Acquire(ctx, "report-42", worker.WithLeaseDuration(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	tok := l.Token()
	row := `document.querySelector('#board-rows tr[data-job="report-42"]')`
	board.wait("report-42 granted to w1 on the board",
		`(r => r && r.cells[1].textContent.startsWith('ACTIVE') && r.cells[2].textContent === 'w1' && r.cells[3].textContent === 'g1 · `+tok.LeaseID+`')(`+row+`)`)

	// Its remaining time counts down.
	left := row + `.querySelector('.secs').textContent`
	first := seconds(t, eval[string](board, left))
	if first < 15 || first > 30 {
		t.Fatalf("time left %vs on a fresh 30 s lease", first)
	}
	time.Sleep(1500 * time.Millisecond)
	second := seconds(t, eval[string](board, left))
	if d := first - second; d < 0.8 || d > 5 {
		t.Fatalf("time left went from %vs to %vs in 1.5 s", first, second)
	}
	if err := l.Progress(ctx, 25); err != nil {
		t.Fatal(err)
	}
	if err := l.Progress(ctx, 50); err != nil {
		t.Fatal(err)
	}
	board.wait("progress 50% on the board", row+`.cells[5].textContent.startsWith('50%')`)

	// The anomalies feed and the job page are open before the stale renewal.
	feed := newTab(t, bctx, "anomalies")
	feed.do(chromedp.Navigate(e.url + "/anomalies"))
	feed.wait("the feed", `document.querySelector('#feed-info') && document.querySelector('#feed-info').textContent.includes('recorded')`)
	feed.mark()
	job := newTab(t, bctx, "job")
	job.do(chromedp.Navigate(e.url + "/jobs/report-42"))
	job.wait("the job page", `document.querySelectorAll('#timeline-svg .band').length === 1 && document.querySelectorAll('#matrix tbody tr').length >= 3`)
	job.mark()

	// Generation 1 ends, generation 2 is granted to w2, then w1 renews
	// generation 1: a stale renewal.
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	_, v := e.decide("worker.w2.report-42.acquire", `{"v":1,"lease_ms":120000}`)
	if v != "granted/ok" {
		t.Fatalf("w2 acquire: %s", v)
	}
	gen2 := e.row("report-42").LeaseID
	e.decide("worker.w2.report-42.progress", `{"v":1,"lease_id":"`+gen2+`","generation":2,"progress_seq":1,"value":10}`)
	staleSeq, v := e.decide("worker.w1.report-42.renew", `{"v":1,"lease_id":"`+tok.LeaseID+`","generation":1,"renew_seq":7}`)
	if v != "lost_authority/stale_generation" {
		t.Fatalf("stale renew: %s", v)
	}
	cause := strconv.FormatUint(staleSeq, 10)

	feed.wait("the stale renewal in the anomalies feed",
		`(r => r && r.querySelector('a[href="/jobs/report-42"]') && r.dataset.kind === 'lost_authority')(document.querySelector('#feed-rows tr[data-job="report-42"][data-reason="stale_generation"]'))`)
	feed.notReloaded()
	job.wait("the stale renewal on the timeline, on generation 1's band",
		`document.querySelector('#timeline-svg .mark[data-cause="`+cause+`"][data-reason="stale_generation"][data-gen="1"]') && document.querySelectorAll('#timeline-svg .band').length === 2`)
	job.notReloaded()
	board.wait("the stale counter on the board", row+`.cells[6].textContent === '1' && `+row+`.cells[2].textContent === 'w2'`)
	board.notReloaded()

	// More evidence on generation 2 for the picture: a duplicate and a late report.
	e.decide("worker.w2.report-42.progress", `{"v":1,"lease_id":"`+gen2+`","generation":2,"progress_seq":3,"value":45}`)
	e.decide("worker.w2.report-42.progress", `{"v":1,"lease_id":"`+gen2+`","generation":2,"progress_seq":3,"value":45}`)
	e.decide("worker.w2.report-42.progress", `{"v":1,"lease_id":"`+gen2+`","generation":2,"progress_seq":2,"value":30}`)
	e.decide("worker.w2.report-42.renew", `{"v":1,"lease_id":"`+gen2+`","generation":2,"renew_seq":1}`)

	// The job page's evidence matrix is `tenure audit --job report-42`'s.
	rep, err := audit.Run(ctx, audit.Config{JS: e.js, Options: audit.Options{Job: "report-42"}})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("audit: %d problems", rep.Problems())
	}
	var want [][]string
	for i := range rep.History {
		r := projector.MatrixRow(&rep.History[i], projector.MatrixOptions{})
		want = append(want, r[:])
	}
	matrixJS := `Array.from(document.querySelectorAll('#matrix tbody tr')).map(tr => Array.from(tr.cells).map(td => td.textContent))`
	var got [][]string
	deadline := time.Now().Add(20 * time.Second)
	for {
		got = eval[[][]string](job, matrixJS)
		if slices.EqualFunc(got, want, slices.Equal) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job page's evidence matrix is not the audit's:\n page  %q\n audit %q", got, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
	heads := eval[[]string](job, `Array.from(document.querySelectorAll('#matrix thead th')).map(th => th.textContent)`)
	if !slices.Equal(heads, projector.MatrixColumns) {
		t.Fatalf("matrix columns %q", heads)
	}
	t.Logf("the job page's evidence matrix equals the audit's: %d rows", len(got))
	// The page's own audit button says the same.
	job.do(chromedp.Click(chromedp.CSS("#job-audit-run")))
	job.wait("the page's audit", `(m => m && m.textContent.startsWith('the matrix above matches'))(document.querySelector('#job-audit-match'))`)
	job.notReloaded()

	// The audit page runs `tenure audit` on demand.
	feed.do(chromedp.Click(chromedp.CSS(`nav a[data-nav="audit"]`)))
	feed.wait("the audit page", `document.querySelector('#audit-run')`)
	feed.do(chromedp.Click(chromedp.CSS("#audit-run")))
	feed.wait("the audit's result", `(v => v && v.textContent.startsWith('OK'))(document.querySelector('#audit-verdict'))`)
	if s := eval[string](feed, `document.querySelector('#audit-summary').textContent`); !strings.Contains(s, "result:      OK") {
		t.Fatalf("audit summary:\n%s", s)
	}
	feed.notReloaded()

	// Filters: by holder, then by state.
	board.do(chromedp.SendKeys(chromedp.CSS("#f-holder"), "w9"))
	board.wait("the holder filter", `(rs => rs.length === 5 && rs.every(r => r.cells[2].textContent === 'w9'))(Array.from(document.querySelectorAll('#board-rows tr[data-job]')))`)
	board.notReloaded()
	board.do(chromedp.Evaluate[chromedp.Void](`(i => { i.value = ''; i.dispatchEvent(new Event('input')) })(document.querySelector('#f-holder'))`))
	board.wait("no filter", `document.querySelectorAll('#board-rows tr[data-job]').length === 12`)

	job.wait("the timeline's latest marks", `document.querySelector('#timeline-svg .mark[data-kind="duplicate"]') && document.querySelector('#timeline-svg .mark[data-kind="late"]')`)
	board.screenshot("board.png", true)
	job.screenshot("job.png", false)
	for _, tb := range []*tab{board, feed, job} {
		tb.checkConsole()
	}
	t.Logf("browser test took %v", time.Since(start).Round(time.Millisecond))
}

// A viewer in a real browser: a wrong token gets the login form again
// with its error; the viewer's token opens the board, whose pages show the
// job (holder, generation, timeline, matrix) without its lease id or
// payload anywhere in the document, no audit and no action (the server
// has them on, for operators); logging out ends the session.
func TestBrowserViewer(t *testing.T) {
	bctx := browser(t)
	e := newEnv(t, true)
	job, lease := e.secretJob()

	tb := newTab(t, bctx, "viewer")
	tb.do(chromedp.Navigate(e.url + "/jobs/" + job))
	tb.wait("the login form", `document.querySelector('#login-form') !== null`)
	tb.do(chromedp.SendKeys(chromedp.CSS("#token"), "tenure_operator_guess"), chromedp.Click(chromedp.CSS("#login-submit")))
	tb.settle("the wrong token's error", `(m => m !== null && m.textContent.startsWith('That is not a token'))(document.querySelector('#login-error'))`)
	tb.expectConsole("status of 401") // the refused login's answer
	e.browserLogin(bctx, Viewer)
	secretsIn := func(tb *tab) string {
		html := eval[string](tb, `document.documentElement.outerHTML`)
		for _, s := range []string{lease, secretPayload} {
			if strings.Contains(html, s) {
				return s
			}
		}
		return ""
	}
	tb.do(chromedp.Navigate(e.url + "/"))
	row := `document.querySelector('#board-rows tr[data-job="` + job + `"]')`
	tb.wait("the job on the viewer's board", `(r => r !== null && r.cells[2].textContent === 'w1' && r.cells[3].textContent === 'g1')(`+row+`)`)
	if s := secretsIn(tb); s != "" {
		t.Fatalf("the viewer's board shows %q", s)
	}
	if vis := eval[bool](tb, `getComputedStyle(document.querySelector('nav a[data-nav="audit"]')).display !== 'none'`); vis {
		t.Error("the Audit link is shown to a viewer")
	}
	tb.do(chromedp.Navigate(e.url + "/jobs/" + job))
	tb.wait("the viewer's job page", `document.querySelectorAll('#timeline-svg .band').length === 1 && document.querySelectorAll('#matrix tbody tr').length >= 3 && document.querySelector('#interleaved .body-hidden') !== null`)
	if got := eval[[]string](tb, `Array.from(document.querySelectorAll('#matrix tbody tr')).map(tr => tr.cells[1].textContent)`); got[len(got)-1] != Hidden {
		t.Errorf("the matrix's lease ids: %q, want %q", got, Hidden)
	}
	if has := eval[bool](tb, `document.querySelector('#job-audit-run') !== null || document.querySelector('#act-cancel') !== null`); has {
		t.Error("a viewer's job page offers an audit or an action")
	}
	if s := secretsIn(tb); s != "" {
		t.Fatalf("the viewer's job page shows %q", s)
	}
	tb.do(chromedp.Navigate(e.url + "/anomalies"))
	tb.wait("the viewer's anomalies", `document.querySelector('#feed-rows tr[data-job="`+job+`"]') !== null`)
	if s := secretsIn(tb); s != "" {
		t.Fatalf("the viewer's anomalies show %q", s)
	}
	tb.do(chromedp.Navigate(e.url + "/audit"))
	tb.wait("the audit page's refusal", `document.querySelector('#audit-viewer') !== null && document.querySelector('#audit-run') === null`)

	// Logging out ends the session: the board asks for a token again.
	// Clicked by script, not at the button's coordinates: the header's
	// live texts (#conn, #health) change width as they update, and on two
	// loaded cores a click aimed at the button's old place landed on the
	// health link beside it (the tab showed /healthz).
	eval[bool](tb, `(document.querySelector('#logout').click(), true)`)
	tb.settle("the login page after the logout", `location.pathname === '/login' && document.querySelector('#login-form') !== null`)
	tb.do(chromedp.Navigate(e.url + "/"))
	tb.settle("the login form after the logout", `document.querySelector('#login-form') !== null && document.querySelector('#board-rows') === null`)
	tb.checkConsole()
}

// With --ui-actions, the job page's operator action is an input the
// coordinator judges; the page shows the verdict and the lease's new state
// without a reload.
func TestBrowserActions(t *testing.T) {
	bctx := browser(t)
	e := newEnv(t, true)
	e.browserLogin(bctx, Operator)
	e.decide("worker.w1.j1.acquire", `{"v":1,"lease_ms":600000}`)
	page := newTab(t, bctx, "job")
	page.do(chromedp.Navigate(e.url + "/jobs/j1"))
	page.wait("the cancel button", `document.querySelector('#act-cancel')`)
	page.mark()
	page.do(chromedp.Evaluate[chromedp.Void](`document.querySelector('#action-reason').value = 'from the browser'`))
	page.do(chromedp.Click(chromedp.CSS("#act-cancel")))
	page.wait("the armed button", `document.querySelector('#act-cancel').textContent.startsWith('confirm')`)
	page.do(chromedp.Click(chromedp.CSS("#act-cancel")))
	page.wait("the verdict", `(v => v && v.textContent.startsWith('accepted: cancel_requested/ok'))(document.querySelector('#action-verdict'))`)
	page.wait("the cancel request on the timeline", `document.querySelector('#timeline-svg .mark[data-kind="cancel_requested"]')`)
	page.notReloaded()
	if r := e.row("j1"); !r.CancelRequested || r.LastKind != "cancel_requested" {
		t.Fatalf("row after the action: %+v", r)
	}
	in, err := e.js.Stream(context.Background(), "TENURE_IN")
	if err != nil {
		t.Fatal(err)
	}
	m, err := in.GetMsg(context.Background(), e.row("j1").LastCause)
	if err != nil {
		t.Fatal(err)
	}
	if m.Subject != "tenure.in.ops.ui.j1.cancel" || !strings.Contains(string(m.Data), `"reason":"from the browser"`) {
		t.Fatalf("the action's input: %s %s", m.Subject, m.Data)
	}
	page.checkConsole()
}

// deadAndUnresolved makes two DEAD queue jobs (mail-d and mail-e: one
// attempt each, failed by w1 with a detail) and an UNRESOLVED one (sync-u:
// a cancellation its holder never reconciles).
func (e *env) deadAndUnresolved() {
	e.t.Helper()
	e.publish("ops.admin._.policy", `{"v":1,"min_lease_ms":100,"max_lease_ms":3600000,"default_lease_ms":30000,"ack_timeout_ms":30000,"cancel_timeout_ms":300,"max_lifetime_ms":86400000,"max_generations":1000}`)
	for _, job := range []string{"mail-d", "mail-e"} {
		if _, v := e.decide("ops.disp."+job+".submit", `{"v":1,"queue":"emails","max_attempts":1}`); v != "submitted/ok" {
			e.t.Fatalf("submit %s: %s", job, v)
		}
	}
	e.publish("worker.w1._.pull", `{"v":1,"queue":"emails","slots":2,"ttl_ms":600000}`)
	for _, job := range []string{"mail-d", "mail-e"} {
		testutil.WaitFor(e.t, 10*time.Second, job+" offered to w1", func() bool { return e.row(job).State == "OFFERED" })
		lease := e.row(job).LeaseID
		e.decide("worker.w1."+job+".ack", `{"v":1,"lease_id":"`+lease+`","generation":1}`)
		e.decide("worker.w1."+job+".result", `{"v":1,"lease_id":"`+lease+`","generation":1,"outcome":"FAILED","detail":"smtp 550: mailbox unavailable"}`)
		testutil.WaitFor(e.t, 10*time.Second, job+" DEAD", func() bool { return e.row(job).State == "DEAD" })
	}
	e.decide("worker.w2.sync-u.acquire", `{"v":1,"lease_ms":600000}`)
	e.decide("ops.disp.sync-u.cancel", `{"v":1,"reason":"stop"}`)
	testutil.WaitFor(e.t, 15*time.Second, "sync-u UNRESOLVED", func() bool { return e.row("sync-u").State == "UNRESOLVED" })
}

// act clicks an action's button on a job page, checks that the first
// click only arms it (nothing is sent: the job's last decision stays), and
// confirms with the second; it waits for the verdict.
func (e *env) act(page *tab, job, button, verdict string) {
	e.t.Helper()
	page.wait("the "+button+" button", `document.querySelector('#`+button+`')`)
	before := e.row(job).LastSeq
	page.do(chromedp.Click(chromedp.CSS("#" + button)))
	page.wait("the armed "+button, `document.querySelector('#`+button+`').textContent.startsWith('confirm')`)
	if got := e.row(job).LastSeq; got != before {
		e.t.Fatalf("%s: a decision about %s after the first click, before the confirmation (%d, was %d)", button, job, got, before)
	}
	page.do(chromedp.Click(chromedp.CSS("#" + button)))
	page.wait("the verdict of "+button, `(v => v && v.textContent.startsWith('accepted: `+verdict+`'))(document.querySelector('#action-verdict'))`)
}

// DEAD and UNRESOLVED jobs in the board (issue 34): "Needs an operator"
// lists them (and the board's header counts them); a DEAD queue job's
// page offers retry and discard, an UNRESOLVED job's settle, each sent
// only after a confirmation, each an ops input the coordinator judges; a
// FAILED attempt reads as failed, with the worker's detail.
func TestBrowserDeadAndUnresolved(t *testing.T) {
	bctx := browser(t)
	e := newEnv(t, true)
	e.browserLogin(bctx, Operator)
	e.deadAndUnresolved()

	anomalies := newTab(t, bctx, "anomalies")
	anomalies.do(chromedp.Navigate(e.url + "/anomalies"))
	anomalies.wait("every job that needs an operator", `['mail-d', 'mail-e', 'sync-u'].every(j => document.querySelector('#blocked-table tr[data-job="' + j + '"]'))`)
	if task := eval[string](anomalies, `document.querySelector('#blocked-table tr[data-job="mail-d"] .task').textContent`); !strings.Contains(task, "retry or discard") || !strings.Contains(task, "smtp 550: mailbox unavailable") {
		t.Errorf("what needs doing about mail-d: %q", task)
	}
	board := newTab(t, bctx, "board")
	board.do(chromedp.Navigate(e.url + "/"))
	board.wait("the board's count of jobs needing an operator", `[...document.querySelectorAll('span')].some(s => s.textContent === '3 need an operator')`)
	board.wait("mail-d's last decision and detail", `(r => r && r.querySelector('td.last').textContent.includes('dead') && r.querySelector('.result-detail').textContent === 'smtp 550: mailbox unavailable')(document.querySelector('#board-rows tr[data-job="mail-d"]'))`)
	// A browser holds at most six connections to a host over HTTP/1.1,
	// and every page keeps one for its live updates: close this tab.
	board.checkConsole()
	board.close()

	page := newTab(t, bctx, "job")
	page.do(chromedp.Navigate(e.url + "/jobs/mail-d"))
	page.wait("the retry and discard buttons", `document.querySelector('#act-retry') && document.querySelector('#act-discard')`)
	page.mark()
	e.act(page, "mail-d", "act-retry", "resolved/retried")
	testutil.WaitFor(t, 10*time.Second, "mail-d back in its queue", func() bool {
		r := e.row("mail-d")
		return r.State != "DEAD" && r.Attempt <= 1 && r.LastCause > 0
	})
	page.wait("the buttons gone with the DEAD state", `document.querySelector('#act-retry') === null`)
	page.notReloaded()

	page.do(chromedp.Navigate(e.url + "/jobs/mail-e"))
	e.act(page, "mail-e", "act-discard", "resolved/discarded")
	testutil.WaitFor(t, 10*time.Second, "mail-e off the board", func() bool {
		_, _, _, ok := e.ui.model.job("mail-e", 0)
		return !ok
	})

	page.do(chromedp.Navigate(e.url + "/jobs/sync-u"))
	e.act(page, "sync-u", "act-settle-failed", "resolved/")
	testutil.WaitFor(t, 10*time.Second, "sync-u settled FAILED", func() bool { return e.row("sync-u").State == "FAILED" })

	// Each action is an ops input of the board's actor.
	in, err := e.js.Stream(context.Background(), "TENURE_IN")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"tenure.in.ops.ui.mail-d.resolve": `"action":"retry"`, "tenure.in.ops.ui.mail-e.resolve": `"action":"discard"`, "tenure.in.ops.ui.sync-u.resolve": `"action":"settle"`}
	info, err := in.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for seq := info.State.LastSeq; seq > 0 && len(want) > 0; seq-- {
		m, err := in.GetMsg(context.Background(), seq)
		if err != nil {
			continue
		}
		if body, ok := want[m.Subject]; ok && strings.Contains(string(m.Data), body) {
			delete(want, m.Subject)
		}
	}
	if len(want) > 0 {
		t.Errorf("the actions' inputs not found: %v", want)
	}
	anomalies.wait("nothing left to do", `document.querySelector('#blocked-table') === null || document.querySelectorAll('#blocked-table tr[data-job]').length === 0`)
	for _, tb := range []*tab{anomalies, page} {
		tb.checkConsole()
	}
}

// The bulk operation on a queue's DEAD jobs in the board: the queue's
// open panel offers to retry (or discard) every DEAD job; the first click
// only arms the button, naming the count (nothing is sent); the second
// sends it, each job its own resolve input; the panel says what became
// of them, and the buttons go with the DEAD jobs.
func TestBrowserBulkDead(t *testing.T) {
	bctx := browser(t)
	e := newEnv(t, true)
	e.browserLogin(bctx, Operator)
	e.deadAndUnresolved() // mail-d and mail-e DEAD in emails

	board := newTab(t, bctx, "board")
	board.do(chromedp.Navigate(e.url + "/"))
	board.wait("the queue emails with two DEAD jobs", `(r => r && r.cells[4].textContent === '2')(document.querySelector('#queues-rows tr[data-queue="emails"]'))`)
	board.do(chromedp.Click(chromedp.CSS(`#queues-rows tr[data-queue="emails"] td.workers button`)))
	retry := `document.querySelector('#queues-rows tr[data-workers-of="emails"] button[data-bulk="retry"]')`
	board.wait("the bulk retry button", retry+` && `+retry+`.textContent === 'Retry every DEAD job'`)
	board.do(chromedp.Click(chromedp.CSS(`#queues-rows tr[data-workers-of="emails"] button[data-bulk="retry"]`)))
	board.wait("the armed bulk retry, naming its count", retry+`.textContent === 'confirm: retry every dead job (2)'`)
	for _, job := range []string{"mail-d", "mail-e"} {
		if r := e.row(job); r.State != "DEAD" {
			t.Fatalf("%s after the first click: %s (sent before the confirmation)", job, r.State)
		}
	}
	board.do(chromedp.Click(chromedp.CSS(`#queues-rows tr[data-workers-of="emails"] button[data-bulk="retry"]`)))
	board.wait("the outcome of the bulk retry", `(o => o && o.textContent === ' retried 2 of 2 DEAD jobs')(document.querySelector('#queues-rows tr[data-workers-of="emails"] .bulk-out'))`)
	for _, job := range []string{"mail-d", "mail-e"} {
		testutil.WaitFor(t, 10*time.Second, job+" back in its queue", func() bool { return e.row(job).State != "DEAD" })
	}
	board.wait("the bulk buttons gone with the DEAD jobs", `!document.querySelector('#queues-rows button[data-bulk]')`)
	board.checkConsole()
}

// The board in a real browser: job ids in natural order (batch-2 before
// batch-10), both ways; no row for a job that never had a lease (a typo, a
// refused offer), though its page works; no doubled state label; every
// column inside a 1,400-pixel window. The audit page's live updates: its
// connection indicator turns live, and it counts the decisions stored
// meanwhile.
func TestBrowserBoard(t *testing.T) {
	bctx := browser(t)
	e := newEnv(t, false)
	e.browserLogin(bctx, Operator)
	var want []string
	for _, n := range []int{10, 2, 1, 11, 3, 12, 9, 4, 5, 8, 6, 7} {
		job := fmt.Sprintf("batch-%d", n)
		e.decide("worker.w"+strconv.Itoa(n)+"."+job+".acquire", `{"v":1,"lease_ms":600000}`)
	}
	for n := 1; n <= 12; n++ {
		want = append(want, fmt.Sprintf("batch-%d", n))
	}
	// An offer withdrawn (CANCELLED, result CANCELLED) and a failure
	// (FAILED, result FAILED).
	e.decide("ops.disp.export-1.offer", `{"v":1,"holder":"w3","lease_ms":300000}`)
	if _, v := e.decide("ops.disp.export-1.cancel", `{"v":1,"reason":"customer withdrew"}`); v != "cancel_requested/offer_withdrawn" {
		t.Fatalf("cancel of the offer: %s", v)
	}
	e.decide("worker.w4.fail-1.acquire", `{"v":1,"lease_ms":600000}`)
	l := e.row("fail-1").LeaseID
	e.decide("worker.w4.fail-1.result", `{"v":1,"lease_id":"`+l+`","generation":1,"outcome":"FAILED"}`)
	want = append(want, "export-1", "fail-1")
	// A typo and a refused offer: jobs that never had a lease.
	if _, v := e.decide("worker.w3.bacth-3.renew", `{"v":1,"lease_id":"L1-x","generation":1,"renew_seq":1}`); v != "lost_authority/no_such_job" {
		t.Fatalf("the typo: %s", v)
	}
	if _, v := e.decide("ops.disp.export-9.offer", `{"v":1,"holder":"w3","lease_ms":7200000}`); v != "rejected/duration_out_of_policy" {
		t.Fatalf("the refused offer: %s", v)
	}

	board := newTab(t, bctx, "board")
	board.do(chromedp.EmulateViewport(1400, 900))
	board.do(chromedp.Navigate(e.url + "/"))
	ids := `Array.from(document.querySelectorAll('#board-rows tr[data-job]')).map(r => r.dataset.job)`
	board.wait("the board's rows", `document.querySelectorAll('#board-rows tr[data-job]').length >= 14`)
	if got := eval[[]string](board, ids); !slices.Equal(got, want) {
		t.Fatalf("board rows %q,\nwant %q", got, want)
	}
	board.wait("the summary", `document.querySelector('#summary').textContent.startsWith('14 jobs')`)
	// No doubled state.
	for job, state := range map[string]string{"export-1": "CANCELLED", "fail-1": "FAILED", "batch-1": "ACTIVE"} {
		if got := eval[string](board, `document.querySelector('#board-rows tr[data-job="`+job+`"]').cells[1].textContent`); got != state {
			t.Errorf("%s's state cell %q, want %q", job, got, state)
		}
	}
	board.checkFits1400()
	// The other way round.
	board.do(chromedp.Evaluate[chromedp.Void](`(s => { s.value = '-id'; s.dispatchEvent(new Event('change')) })(document.querySelector('#f-sort'))`))
	board.wait("the descending order", `new URLSearchParams(location.search).get('sort') === '-id' && document.querySelector('#board-rows tr[data-job]').dataset.job === 'fail-1'`)
	got := eval[[]string](board, ids)
	slices.Reverse(got)
	if !slices.Equal(got, want) {
		t.Fatalf("board rows, descending, reversed: %q,\nwant %q", got, want)
	}

	// The typo's page: the rejection, no lease.
	page := newTab(t, bctx, "job")
	page.do(chromedp.Navigate(e.url + "/jobs/bacth-3"))
	page.wait("the typo's page", `(s => s && s.textContent === 'NONE')(document.querySelector('#job-state')) && document.querySelector('#timeline-svg').textContent.includes('never had a lease') && document.querySelectorAll('#matrix tbody tr').length === 1`)
	// A job page's state card, and its band, say CANCELLED once.
	page.do(chromedp.Navigate(e.url + "/jobs/export-1"))
	page.wait("export-1's page", `(s => s && s.textContent === 'CANCELLED')(document.querySelector('#job-state')) && (b => b && b.textContent === 'CANCELLED')(document.querySelector('#timeline-svg .bandstate'))`)

	// The audit page, opened directly: its indicator turns live, and it
	// counts the decisions stored while it is open.
	audit := newTab(t, bctx, "audit")
	audit.do(chromedp.Navigate(e.url + "/audit"))
	audit.wait("the audit page live", `document.querySelector('#conn').textContent === 'live' && /read \d+ decisions/.test(document.querySelector('#audit-live').textContent)`)
	audit.mark()
	audit.do(chromedp.Click(chromedp.CSS("#audit-run")))
	audit.wait("the audit's result", `(v => v && v.textContent.startsWith('OK'))(document.querySelector('#audit-verdict'))`)
	e.decide("worker.w1.batch-1.renew", `{"v":1,"lease_id":"`+e.row("batch-1").LeaseID+`","generation":1,"renew_seq":1}`)
	audit.wait("a decision stored since the audit", `document.querySelector('#audit-live').textContent.endsWith(', 1 of them since the audit below began')`)
	audit.notReloaded()
	for _, tb := range []*tab{board, page, audit} {
		tb.checkConsole()
	}
}

// The queues view of the board, in a real browser: a queue's depth (a
// job ready, one waiting out its backoff after a failed attempt), its live
// lease, a DEAD job, and the workers announcing capacity with their free
// slots, updated live; a queue's name filters the board to its jobs, whose
// rows say their queue and attempts and when a waiting one is ready; a
// queue job's page shows its queue, attempt, ready_at and why its last
// attempt ended.
func TestBrowserQueues(t *testing.T) {
	bctx := browser(t)
	e := newEnv(t, false)
	e.browserLogin(bctx, Operator)
	e.decide("ops.disp.mail-1.submit", `{"v":1,"queue":"emails","max_attempts":2,"backoff_ms":600000,"backoff_max_ms":600000}`)
	e.decide("ops.disp.mail-2.submit", `{"v":1,"queue":"emails"}`)
	e.decide("ops.disp.mail-3.submit", `{"v":1,"queue":"emails"}`)
	e.decide("ops.disp.rep-1.submit", `{"v":1,"queue":"reports","max_attempts":1,"lease_ms":300}`)
	e.decide("worker.w9.plain-1.acquire", `{"v":1,"lease_ms":600000}`) // a job outside any queue

	board := newTab(t, bctx, "board")
	board.do(chromedp.Navigate(e.url + "/"))
	q := func(queue string) string {
		return `document.querySelector('#queues-rows tr[data-queue="` + queue + `"]')`
	}
	cells := func(queue string) string {
		return `Array.from(` + q(queue) + `.cells).map(c => c.textContent).join('|')`
	}
	board.wait("the queues view", q("emails")+` && `+cells("emails")+` === 'emails|3|0|0|0|0|0|0|0'`)
	board.mark()

	// w1 announces one slot on emails: mail-1 (the first submitted) is
	// offered; w1 fails it: it waits out its backoff of about 10 minutes,
	// and mail-2 is offered in its place.
	e.publish("worker.w1._.pull", `{"v":1,"queue":"emails","slots":1,"ttl_ms":600000}`)
	testutil.WaitFor(t, 10*time.Second, "mail-1 offered to w1", func() bool { return e.row("mail-1").State == "OFFERED" })
	l := e.row("mail-1").LeaseID
	e.decide("worker.w1.mail-1.ack", `{"v":1,"lease_id":"`+l+`","generation":1}`)
	e.decide("worker.w1.mail-1.result", `{"v":1,"lease_id":"`+l+`","generation":1,"outcome":"FAILED","detail":"SMTP 451"}`)
	testutil.WaitFor(t, 10*time.Second, "mail-2 offered to w1", func() bool { return e.row("mail-2").State == "OFFERED" })
	// w3 announces a slot on emails and declines mail-3, offered to it:
	// a refusal (rules revision 5) that strikes it, halves its window and
	// withdraws its announcement; mail-3 is ready again (w1 has no slot
	// free).
	e.publish("worker.w3._.pull", `{"v":1,"queue":"emails","slots":1,"ttl_ms":600000}`)
	testutil.WaitFor(t, 10*time.Second, "mail-3 offered to w3", func() bool { r := e.row("mail-3"); return r.State == "OFFERED" && r.Holder == "w3" })
	e.decide("worker.w3.mail-3.release", `{"v":1,"lease_id":"`+e.row("mail-3").LeaseID+`","generation":1}`)
	testutil.WaitFor(t, 10*time.Second, "mail-3 queued again", func() bool { return e.row("mail-3").State == "QUEUED" })
	// w2 announces a slot on reports, ACKs rep-1 and lets its lease
	// expire: its only attempt spent, DEAD. The expiry is w2's refusal
	// (rules revision 5), which withdraws its announcement: it announces
	// again (w2's slot free again).
	e.publish("worker.w2._.pull", `{"v":1,"queue":"reports","slots":1,"ttl_ms":600000}`)
	testutil.WaitFor(t, 10*time.Second, "rep-1 offered to w2", func() bool { return e.row("rep-1").State == "OFFERED" })
	e.decide("worker.w2.rep-1.ack", `{"v":1,"lease_id":"`+e.row("rep-1").LeaseID+`","generation":1}`)
	testutil.WaitFor(t, 10*time.Second, "rep-1 DEAD", func() bool { return e.row("rep-1").State == "DEAD" })
	e.publish("worker.w2._.pull", `{"v":1,"queue":"reports","slots":1,"ttl_ms":600000}`)

	board.wait("emails: one ready, one waiting, one in flight, w1's slot taken",
		cells("emails")+` === 'emails|1|1|1|0|0|0|1 · 0 of 1 slots free|0'`)
	board.wait("reports: one dead, w2's slot free", cells("reports")+` === 'reports|0|0|0|1|0|0|1 · 1 of 1 slots free|0'`)
	board.wait("the queue rows on the board",
		`(r => r && r.querySelector('.qinfo').textContent === ' emails · 1/2' && /^ready in \d+m \d\ds$/.test(r.cells[4].textContent))(document.querySelector('#board-rows tr[data-job="mail-1"]'))`)
	// A queue's workers cell opens its workers beneath it, the worst
	// standing first: w3 (declined an offer: a strike, its window halved,
	// its announcement withdrawn), then w1 (two offers, one failure).
	workers := func(queue string) string {
		return `Array.from(document.querySelectorAll('#queues-rows tr[data-workers-of="` + queue + `"] tbody tr')).map(r => ` +
			`r.dataset.worker + '=' + Array.from(r.cells).slice(1).map(c => c.textContent).join('|')).join(' ; ')`
	}
	board.do(chromedp.Click(chromedp.CSS(`#queues-rows tr[data-queue="emails"] td.workers button`)))
	// Columns: slots, leases, announced until, window, strikes, held
	// until, offers, declines, releases, missed ACKs, expiries,
	// completions, failures.
	board.wait("the workers of emails", `/^w3=0\|0\|–\|4\|1\|[^|]+\|1\|1\|0\|0\|0\|0\|0 ; w1=1\|1\|\d\d:\d\d:\d\d\|8\|0\|–\|2\|0\|0\|0\|0\|0\|1$/.test(`+workers("emails")+`)`)
	heldUntil := func(queue, worker string) string {
		p, _ := e.ui.model.queuePage(queue, time.Now())
		for _, w := range p.Queues[0].WorkerList {
			if w.Worker == worker && w.Standing != nil {
				return w.Standing.HeldUntil
			}
		}
		return ""
	}
	if got, want := eval[string](board, `document.querySelector('#queues-rows tr[data-workers-of="emails"] tr[data-worker="w3"] td:nth-child(7)').title`), heldUntil("emails", "w3"); want == "" || got != want {
		t.Errorf("w3's held until on the board: %q, its standing's: %q", got, want)
	}
	if n := eval[int](board, `document.querySelectorAll('#queues-rows tr[data-workers-of="reports"]').length`); n != 0 {
		t.Errorf("the workers of reports are open (%d rows)", n)
	}
	board.do(chromedp.Click(chromedp.CSS(`#queues-rows tr[data-queue="reports"] td.workers button`)))
	board.wait("the workers of reports: w2 let rep-1 expire", `/^w2=1\|0\|\d\d:\d\d:\d\d\|4\|1\|[^|]+\|1\|0\|0\|0\|1\|0\|0$/.test(`+workers("reports")+`)`)
	board.wait("the workers of emails stay open through the reloads", `(`+workers("emails")+`).startsWith('w3=')`)
	// An operator limits reports (rules revision 9): its key acct-1 to 2
	// live leases, the queue to 5 offers a minute. The queue's name says
	// how many limits are in force, and its open panel lists them beneath
	// its workers (columns: max active, live, rate).
	e.publish("ops.admin._.limit", `{"v":1,"queue":"reports","concurrency_key":"acct-1","max_active":2}`)
	e.publish("ops.admin._.limit", `{"v":1,"queue":"reports","rate":5,"period_ms":60000}`)
	board.wait("reports names its two limits", `(e => e && e.textContent === ' · 2 limits')(document.querySelector('#queues-rows tr[data-queue="reports"] .limits-count'))`)
	board.wait("the limits of reports", `Array.from(document.querySelectorAll('#queues-rows tr[data-workers-of="reports"] .limits-table tbody tr')).map(r => `+
		`Array.from(r.cells).map(c => c.textContent).join('|')).join(' ; ') === '(the queue)|–|–|5 per 1 min ; acct-1|2|0|–'`)
	if n := eval[int](board, `document.querySelectorAll('#queues-rows tr[data-workers-of="emails"] .limits-table').length`); n != 0 {
		t.Errorf("emails, without limits, lists a limits table (%d)", n)
	}
	board.screenshot("queue-workers.png", false)
	board.do(chromedp.Click(chromedp.CSS(`#queues-rows tr[data-queue="emails"] td.workers button`)))
	board.wait("the workers of emails closed", `!document.querySelector('#queues-rows tr[data-workers-of="emails"]')`)
	board.notReloaded()

	// A queue's name filters the board to its jobs.
	board.do(chromedp.Click(chromedp.CSS(`#queues-rows tr[data-queue="emails"] a`)))
	board.wait("the board of queue emails", `new URLSearchParams(location.search).get('queue') === 'emails' && `+
		`Array.from(document.querySelectorAll('#board-rows tr[data-job]')).map(r => r.dataset.job).join(',') === 'mail-1,mail-2,mail-3'`)

	page := newTab(t, bctx, "job")
	page.do(chromedp.Navigate(e.url + "/jobs/mail-1"))
	text := func(id string) string { return `(c => c ? c.textContent : '')(document.querySelector('#` + id + `'))` }
	page.wait("mail-1's queue cards", text("job-queue")+` === 'emails' && `+text("job-attempt")+` === '1 of 2' && `+
		text("job-attempt-reason")+` === 'attempt_failed' && /^\d\d:\d\d:\d\d\.\d{3}$/.test(`+text("job-ready")+`) && `+text("job-state")+`.startsWith('QUEUED')`)
	ready := e.row("mail-1").ReadyAt
	if got := eval[string](page, `document.querySelector('#job-ready-at').title`); got != time.UnixMilli(ready).UTC().Format("2006-01-02T15:04:05.000Z") {
		t.Errorf("mail-1's ready_at on its page: %s, want %s", got, time.UnixMilli(ready).UTC())
	}
	board.screenshot("queues.png", false)
	for _, tb := range []*tab{board, page} {
		tb.checkConsole()
	}
}

// A worker its standing holds (rules revision 5: three missed ACKs in a
// row, each after the hold of the one before, hold it 4 s) is flagged HELD
// in its queue's workers, to a viewer too, with its strikes and missed
// ACKs; the flag goes once the hold ends.
func TestBrowserQueueWorkerHeld(t *testing.T) {
	bctx := browser(t)
	e := newEnv(t, false)
	e.browserLogin(bctx, Viewer)
	e.decide("ops.disp.mail-1.submit", `{"v":1,"queue":"emails","ack_timeout_ms":100}`)
	board := newTab(t, bctx, "board")
	board.do(chromedp.Navigate(e.url + "/"))
	board.wait("the queues view", `document.querySelector('#queues-rows tr[data-queue="emails"] td.workers button')`)
	board.do(chromedp.Click(chromedp.CSS(`#queues-rows tr[data-queue="emails"] td.workers button`)))
	board.wait("no worker known yet", `(r => r && r.textContent === 'no worker known on this queue')(document.querySelector('#queues-rows tr[data-workers-of="emails"]'))`)
	for strike := range 3 {
		// Each offer is a new generation: waited for by that, not by the
		// OFFERED state, which lasts the 100 ms ACK timeout only (on two
		// loaded cores the polls missed it).
		gen := e.row("mail-1").Generation
		e.publish("worker.w3._.pull", `{"v":1,"queue":"emails","slots":1,"ttl_ms":600000}`)
		testutil.WaitFor(t, 10*time.Second, "mail-1 offered to w3", func() bool { return e.row("mail-1").Generation > gen })
		testutil.WaitFor(t, 10*time.Second, "w3's ACK missed", func() bool { return e.row("mail-1").State == "QUEUED" })
		if strike < 2 { // a refusal while held is no strike: the hold, 2^strike s, ends first
			time.Sleep(time.Duration(1<<strike)*time.Second + 200*time.Millisecond)
		}
	}
	row := `document.querySelector('#queues-rows tr[data-workers-of="emails"] tr[data-worker="w3"]')`
	board.wait("w3 held, with three strikes and missed ACKs",
		`(r => r && r.classList.contains('held') && r.cells[0].textContent === 'w3HELD' && r.cells[5].textContent === '3' && r.cells[10].textContent === '3')(`+row+`)`)
	board.wait("the flag gone with the hold", `(r => r && !r.querySelector('.flag') && r.cells[6].textContent === '–')(`+row+`)`)
	board.checkConsole()
}

// checkFits1400 checks that every column of the board in tb, a tab with a
// 1,400-pixel viewport, is inside the window: nothing to scroll sideways,
// the last column's right edge inside the table's frame.
func (tb *tab) checkFits1400() {
	tb.t.Helper()
	fit := eval[[]float64](tb, `(w => [w.scrollWidth, w.clientWidth, document.querySelector('#board thead th:last-child').getBoundingClientRect().right, w.getBoundingClientRect().right, window.innerWidth])(document.querySelector('.tablewrap'))`)
	if fit[4] != 1400 {
		tb.t.Fatalf("the window is %v pixels wide, want 1,400", fit[4])
	}
	if fit[0] > fit[1] || fit[2] > fit[3] || fit[3] > fit[4] {
		tb.t.Errorf("the board does not fit 1,400 pixels: table %v wide in a frame of %v, last column ends at %v, the frame at %v, the window %v", fit[0], fit[1], fit[2], fit[3], fit[4])
	}
	// The table fills its frame: what it needs at the least is its width at
	// min-content (set and reset before the page draws again).
	least := eval[float64](tb, `(b => { b.style.width = 'min-content'; const w = b.offsetWidth; b.style.width = ''; return w })(document.querySelector('#board'))`)
	tb.t.Logf("the board in 1,400 pixels: table %v wide (%v at the least) in a frame of %v, last column ends at %v, the frame at %v", fit[0], least, fit[1], fit[2], fit[3])
}

// The job page's timeline zooms to one generation: a generation of a
// fraction of a second, drawn as a clump next to a long one, spans the
// plot when zoomed to; the zoom survives live updates, is in the URL, and
// counts the generation's marks outside its life instead of squeezing them
// in.
func TestBrowserZoom(t *testing.T) {
	bctx := browser(t)
	e := newEnv(t, false)
	e.browserLogin(bctx, Operator)
	e.decide("worker.w1.zoom-1.acquire", `{"v":1,"lease_ms":600000}`)
	g1 := e.row("zoom-1").LeaseID
	e.decide("worker.w1.zoom-1.progress", `{"v":1,"lease_id":"`+g1+`","generation":1,"progress_seq":1,"value":40}`)
	e.decide("worker.w1.zoom-1.progress", `{"v":1,"lease_id":"`+g1+`","generation":1,"progress_seq":2,"value":80}`)
	if _, v := e.decide("worker.w1.zoom-1.release", `{"v":1,"lease_id":"`+g1+`","generation":1}`); v != "released/ok" {
		t.Fatalf("release: %s", v)
	}
	if _, v := e.decide("worker.w2.zoom-1.acquire", `{"v":1,"lease_ms":600000}`); v != "granted/ok" {
		t.Fatalf("generation 2: %s", v)
	}

	page := newTab(t, bctx, "job")
	page.do(chromedp.Navigate(e.url + "/jobs/zoom-1"))
	page.mark()
	// x of the marks of a kind on generation 1's band, and the plot's ends.
	const marksJS = `(kind => [...document.querySelectorAll('#timeline-svg .mark[data-gen="1"][data-kind="' + kind + '"]')].map(m => (b => b.x + b.width / 2)(m.getBBox())))`
	const plotJS = `(s => [Number(s.dataset.plotLeft), Number(s.dataset.plotRight)])(document.querySelector('#timeline-svg'))`
	const bandW = `(g => (r => r ? r.getBBox().width : 0)(document.querySelector('#timeline-svg .band[data-gen="' + g + '"] rect.leasepart')))`
	// Generation 2 lives on (the page redraws it every second): wait until
	// generation 1 is a clump beside it.
	page.wait("generation 1 a clump next to generation 2", `document.querySelectorAll('#timeline-svg .band').length === 2 && `+bandW+`(2) > 25 * `+bandW+`(1)`)
	plot := eval[[]float64](page, plotJS)
	plotW := plot[1] - plot[0]
	spread := func() float64 {
		granted := eval[[]float64](page, marksJS+`('granted')`)
		released := eval[[]float64](page, marksJS+`('released')`)
		if len(granted) != 1 || len(released) != 1 {
			t.Fatalf("generation 1's marks: granted at %v, released at %v", granted, released)
		}
		return released[0] - granted[0]
	}
	if d := spread(); d > 0.05*plotW {
		t.Fatalf("unzoomed, generation 1 spans %.0f of %.0f pixels: not the clump this test needs", d, plotW)
	}

	// Zoom to generation 1: its life spans the plot.
	page.do(chromedp.Evaluate[chromedp.Void](`(s => { s.value = '1'; s.dispatchEvent(new Event('change')) })(document.querySelector('#tl-zoom'))`))
	page.wait("the zoom to generation 1", `document.querySelector('#timeline-svg').dataset.zoom === '1' && document.querySelectorAll('#timeline-svg .band').length === 1 && new URLSearchParams(location.search).get('gen') === '1'`)
	if d := spread(); d < 0.8*plotW {
		t.Fatalf("zoomed to generation 1, its grant and release are %.0f pixels apart in a plot of %.0f", d, plotW)
	}
	if n := eval[int](page, `document.querySelectorAll('#timeline-svg .mark[data-gen="1"][data-kind="progressed"]').length`); n != 2 {
		t.Fatalf("%d progress marks on the zoomed band, want 2", n)
	}
	if w := eval[float64](page, bandW+`(1)`); w < 0.8*plotW {
		t.Fatalf("zoomed, generation 1's band is %.0f pixels wide in a plot of %.0f", w, plotW)
	}
	page.screenshot("job-zoom.png", false)

	// A stale renewal of generation 1, after its end: the page
	// updates live, stays zoomed, and counts the mark it does not draw.
	if _, v := e.decide("worker.w1.zoom-1.renew", `{"v":1,"lease_id":"`+g1+`","generation":1,"renew_seq":1}`); v != "lost_authority/stale_generation" {
		t.Fatalf("stale renewal: %s", v)
	}
	page.wait("the stale renewal counted outside generation 1's life", `(o => o && o.textContent.startsWith('1 mark of g1 outside its life'))(document.querySelector('#tl-outside')) && document.querySelector('#timeline-svg').dataset.zoom === '1'`)
	if n := eval[int](page, `document.querySelectorAll('#timeline-svg .mark[data-kind="lost_authority"]').length`); n != 0 {
		t.Fatalf("the stale renewal is drawn in the zoomed view (%d marks)", n)
	}
	page.notReloaded()

	// Back to every generation: both bands, the stale renewal on g1's.
	page.do(chromedp.Evaluate[chromedp.Void](`(s => { s.value = '0'; s.dispatchEvent(new Event('change')) })(document.querySelector('#tl-zoom'))`))
	page.wait("every generation", `document.querySelector('#timeline-svg').dataset.zoom === 'all' && document.querySelectorAll('#timeline-svg .band').length === 2 && document.querySelector('#timeline-svg .mark[data-gen="1"][data-kind="lost_authority"]') && location.search === ''`)
	// Clicking a band zooms to it.
	page.do(chromedp.Click(chromedp.CSS(`#timeline-svg .band[data-gen="2"] rect.leasepart`)))
	page.wait("the zoom to generation 2 by a click", `document.querySelector('#timeline-svg').dataset.zoom === '2' && document.querySelector('#tl-zoom').value === '2'`)
	// A zoomed view is a link.
	page.do(chromedp.Navigate(e.url + "/jobs/zoom-1?gen=1"))
	page.wait("the linked zoom", `(s => s && s.dataset.zoom === '1')(document.querySelector('#timeline-svg')) && document.querySelector('#tl-zoom').value === '1'`)
	page.checkConsole()
}

// Without a browser, the browser tests skip on a developer's machine and
// fail where one is required or named, or where the requirement is
// misspelt.
func TestNoBrowser(t *testing.T) {
	lookup := errors.New("no chromium, chromium-browser or google-chrome on the PATH")
	for _, c := range []struct {
		require, named string
		fail           bool
		says           string
	}{
		{"", "", false, "apt-get install chromium"},
		{"0", "", false, "apt-get install chromium"},
		{"1", "", true, "apt-get install chromium"},
		{"1", "/opt/chrome", true, "no chromium"},
		{"", "/opt/chrome", true, "no chromium"},
		{"0", "/opt/chrome", true, "no chromium"},
		{"true", "", true, `TENURE_REQUIRE_BROWSER="true"`},
		{"yes", "", true, `TENURE_REQUIRE_BROWSER="yes"`},
		{" 1", "", true, `TENURE_REQUIRE_BROWSER=" 1"`},
	} {
		fail, msg := noBrowser(lookup, c.require, c.named)
		if fail != c.fail || !strings.Contains(msg, c.says) {
			t.Errorf("TENURE_REQUIRE_BROWSER=%q TENURE_CHROMIUM=%q: fail %v, %q; want fail %v, saying %q", c.require, c.named, fail, msg, c.fail, c.says)
		}
		if !fail && !strings.HasPrefix(msg, "SKIPPED") {
			t.Errorf("TENURE_REQUIRE_BROWSER=%q: a skip that does not say so: %q", c.require, msg)
		}
	}
}

// browser itself, on a machine without a browser: TENURE_CHROMIUM names
// none and the PATH holds none. Run in a child process, since a skip and a
// failure end the test that gets them.
func TestBrowserAbsent(t *testing.T) {
	if os.Getenv("TENURE_BROWSER_ABSENT_CHILD") == "1" {
		browser(t)
		t.Fatal("browser returned without a browser")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		require string
		want    string
	}{
		{"", "--- SKIP: TestBrowserAbsent"},
		{"1", "--- FAIL: TestBrowserAbsent"},
	} {
		cmd := exec.Command(exe, "-test.run", "^TestBrowserAbsent$", "-test.v")
		cmd.Env = append(os.Environ(), "TENURE_BROWSER_ABSENT_CHILD=1", "PATH="+t.TempDir(), "TENURE_CHROMIUM=", requireBrowser+"="+c.require)
		out, _ := cmd.CombinedOutput()
		if !strings.Contains(string(out), c.want) || !strings.Contains(string(out), "apt-get install chromium") {
			t.Errorf("%s=%q without a browser:\n%s\nwant %q, naming what to install", requireBrowser, c.require, out, c.want)
		}
	}
}

// CI requires the browser, before it runs the tests: it can never skip
// them silently.
func TestCIRequiresBrowser(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	ci := string(b)
	req := strings.Index(ci, "\nexport "+requireBrowser+"=1\n")
	test := strings.Index(ci, "\nmake test\n")
	if req < 0 || test < 0 || req > test {
		t.Fatalf(".ci/run does not export %s=1 before make test:\n%s", requireBrowser, ci)
	}
}
