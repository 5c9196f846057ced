package events_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/maknow/tenure/events"
)

// AppendTime must render exactly what time.RFC3339Nano in UTC renders.
func TestAppendTimeMatchesRFC3339Nano(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	cases := []int64{0, 1, 999, 1e9, 1767225600 * 1e9, 1767225600*1e9 + 500e6, 951782400 * 1e9, 4107542400*1e9 - 1, 1<<63 - 1, -1, -1e18}
	for range 200000 {
		cases = append(cases, r.Int64N(1<<63-1))
		cases = append(cases, r.Int64N(4e18)/1e6*1e6)
	}
	for _, c := range cases {
		want := time.Unix(0, c).UTC().Format(time.RFC3339Nano)
		if got := string(events.AppendTime(nil, c)); got != want {
			t.Fatalf("AppendTime(%d) = %s, want %s", c, got, want)
		}
	}
}
