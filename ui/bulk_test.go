package ui

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/maknow/tenure/internal/testutil"
)

// The board's bulk operation on a queue's DEAD jobs (POST
// /api/queues/{queue}/dead): a viewer's (session or bearer token) and a
// forged cross-site request are refused 403 and publish nothing; a count
// other than the one confirmed is refused 409 and publishes nothing; the
// operator's retry of the two DEAD jobs of emails queues each again, each
// its own resolved decision; a second one finds none to act on (409).
func TestBulkDeadAction(t *testing.T) {
	e := newEnv(t, true)
	e.deadAndUnresolved()
	viewer := e.login(Viewer)
	// The ops inputs stored (a coordinator's tick or checkpoint may come
	// in between: they are not counted).
	inputs := func() uint64 {
		s, err := e.js.Stream(context.Background(), "TENURE_IN")
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		n := uint64(0)
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
			m, err := s.GetMsg(context.Background(), seq)
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(m.Subject, "tenure.in.ops.") {
				n++
			}
		}
		return n
	}
	const path = "/api/queues/emails/dead"
	body := DeadActionRequest{Action: "retry", Reason: "the mail server is back", Expect: 2}
	before := inputs()
	if code := viewer.post(path, body, nil); code != http.StatusForbidden {
		t.Errorf("a viewer's session: %d, want 403", code)
	}
	code, _, _ := e.anonymousBody(http.MethodPost, path, `{"action":"retry","expect":2}`, func(r *http.Request) {
		r.Header.Set("Authorization", "Bearer "+e.tokens[Viewer].String())
	})
	if code != http.StatusForbidden {
		t.Errorf("a viewer's bearer token: %d, want 403", code)
	}
	req, _ := http.NewRequest(http.MethodPost, e.url+path, strings.NewReader(`{"action":"retry","expect":2}`))
	req.Header.Set("Content-Type", "text/plain")
	req.Header.Set("Origin", "http://evil.example")
	req.Header.Set(CSRFHeader, e.op.csrf)
	resp, err := e.op.hc.Do(req) // with the operator's session cookie
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("another site's Origin with the operator's session: %d, want 403", resp.StatusCode)
	}
	for _, bad := range []DeadActionRequest{
		{Action: "retry", Expect: 3},  // not what the queue has
		{Action: "retry"},             // no count confirmed
		{Action: "settle", Expect: 2}, // no action on DEAD jobs
		{Action: "retry", Expect: 2, LastReason: "sleepy"},
	} {
		if code := e.op.post(path, bad, nil); code != http.StatusConflict && code != http.StatusBadRequest {
			t.Errorf("%+v: %d, want 409 or 400", bad, code)
		}
	}
	if code := e.op.post("/api/queues/a.b/dead", body, nil); code != http.StatusBadRequest {
		t.Errorf("an invalid queue name: %d, want 400", code)
	}
	if n := inputs(); n != before {
		t.Fatalf("the refused requests stored %d inputs", n-before)
	}
	for _, job := range []string{"mail-d", "mail-e"} {
		if r := e.row(job); r.State != "DEAD" {
			t.Fatalf("%s after the refused requests: %s", job, r.State)
		}
	}

	var res DeadActionResult
	if code := e.op.post(path, body, &res); code != http.StatusOK || res.Jobs != 2 || res.Resolved != 2 || res.RefusedCount != 0 || res.More {
		t.Fatalf("the operator's retry of every DEAD job of emails: %d %+v", code, res)
	}
	if n := inputs(); n != before+2 {
		t.Errorf("the retry stored %d inputs, want one per job (2)", n-before)
	}
	for _, job := range []string{"mail-d", "mail-e"} {
		testutil.WaitFor(t, 10*time.Second, job+" retried", func() bool { return e.row(job).State != "DEAD" })
	}
	if code := e.op.post(path, body, nil); code != http.StatusConflict {
		t.Errorf("the same retry again, nothing DEAD any more: %d, want 409", code)
	}
}
