package projector_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/projector"
)

// FormatBlocks writes one block per row, every column under its name, two a
// line, within 120 columns; TimeLayout renders times with it.
func TestMatrixBlocks(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 59, 19, 450_489_755, time.UTC).UnixNano()
	d := events.Decision{Cause: 7, At: at, Kind: events.KindUnresolved, Reason: events.ReasonExpiredCancelUnreconciled,
		Job: events.Job{ID: "export-9", LeaseID: "L19-DUBzUBPQ8mhdGFAwKFpwDA", Generation: 1, Holder: "w2", IssuedAt: at,
			Duration: int64(800 * time.Millisecond), ExpiresAt: at + int64(800*time.Millisecond), CancelReq: true, CancelAt: at,
			State: events.StateUnresolved}}
	var b bytes.Buffer
	if err := projector.WriteMatrix(&b, projector.FormatBlocks, []events.Decision{d, d}, projector.MatrixOptions{TimeLayout: "15:04:05.000"}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	blocks := strings.Split(out, "\n\n")
	if len(blocks) != 2 {
		t.Fatalf("%d blocks, want 2:\n%s", len(blocks), out)
	}
	r := projector.MatrixRow(&d, projector.MatrixOptions{TimeLayout: "15:04:05.000"})
	if !strings.HasPrefix(blocks[0], "Job ID  export-9\n") {
		t.Errorf("a block does not start with its job id:\n%s", blocks[0])
	}
	for k, label := range projector.MatrixColumns[1:] {
		if !strings.Contains(blocks[0], "  "+label+strings.Repeat(" ", 25-len(label))+r[k+1]) {
			t.Errorf("no %q under %q:\n%s", r[k+1], label, blocks[0])
		}
	}
	for _, want := range []string{"Issued At                12:59:19.450\n", "requested 12:59:19.450 / not acked"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if len(line) > 120 || strings.HasSuffix(line, " ") {
			t.Errorf("line of %d columns (or with trailing spaces): %q", len(line), line)
		}
	}
}
