package api

import (
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// PROTOCOL.md §23 is the API's contract for clients in other languages:
// it names every subject, every field of every request and answer, and
// the bounds.
func TestProtocolDocumentsTheAPI(t *testing.T) {
	doc, err := os.ReadFile("../PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(doc), "## 23. The state API")
	if i < 0 {
		t.Fatal("PROTOCOL.md has no §23")
	}
	sec := string(doc)[i:]
	for _, s := range []string{SubjectJob, SubjectJobs, SubjectQueue, SubjectQueues, SubjectResult, SubjectsFilter} {
		if !strings.Contains(sec, "`"+s+"`") {
			t.Errorf("§23 does not name subject %s", s)
		}
	}
	for _, n := range []int{MaxRequestBytes, DefaultJobsLimit, MaxJobsLimit, DefaultQueuesLimit, MaxQueuesLimit, MaxWorkersListed, int(RateWindow.Seconds())} {
		if !strings.Contains(sec, " "+strconv.Itoa(n)) {
			t.Errorf("§23 does not say the bound %d", n)
		}
	}
	for _, v := range []any{JobRequest{}, JobsRequest{}, QueueRequest{}, QueuesRequest{}, Position{}, LastDecision{}, JobReply{},
		JobSummary{}, JobsReply{}, QueueReply{}, QueuesReply{}, QueueStats{}, Rates{}, Counts{}, WorkerCapacity{}, ErrorReply{}, ErrorBody{}, ResultRequest{}, ResultReply{}, WorkerResult{}} {
		typ := reflect.TypeOf(v)
		for f := range typ.Fields() {
			if f.Anonymous {
				continue // Position, documented on its own
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if !strings.Contains(sec, "`"+name+"`") {
				t.Errorf("§23 does not name field %q of %s", name, typ.Name())
			}
		}
	}
}
