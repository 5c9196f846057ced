package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/maknow/tenure/events"
)

// TestVerdictShapes (opt-in: TENURE_VERDICT_SHAPES=<rounds>, optionally
// TENURE_SHAPES_SYNC=always) measures what each part of a verdict costs the
// SDK path's fair baseline (baselineSDKPipeline): the same raw pipeline with
// answers of 200 bytes and no headers, with the renewal verdict as stored
// (body and headers), its body alone, its headers alone on 200 bytes, its
// headers without the two Tenure-Cause and Tenure-N that repeat the body,
// and half its body with all its headers. Each round runs the SDK path
// (which also yields the verdict) and every shape once, in a rotating order;
// the medians and their ratios to the 200-byte answers are logged
// (BENCHMARKS.md, "Performance, round two", "What a verdict costs").
func TestVerdictShapes(t *testing.T) {
	rounds, _ := strconv.Atoi(os.Getenv("TENURE_VERDICT_SHAPES"))
	if rounds <= 0 {
		t.Skip("TENURE_VERDICT_SHAPES=<rounds>")
	}
	sync := SyncInterval
	if os.Getenv("TENURE_SHAPES_SYNC") == SyncAlways {
		sync = SyncAlways
	}
	b := &runner{cfg: Config{Sync: sync, Quick: true}.withDefaults(), dir: t.TempDir(), res: &Result{}}
	ctx := context.Background()

	without := func(h nats.Header, keys ...string) nats.Header {
		c := nats.Header{}
		for k, v := range h {
			if !slices.Contains(keys, k) {
				c[k] = v
			}
		}
		return c
	}
	shapes := []shape{
		{"200 bytes, no headers", func(*nats.Msg) *nats.Msg { return nil }},
		{"the verdict", func(v *nats.Msg) *nats.Msg { return v }},
		{"its body alone", func(v *nats.Msg) *nats.Msg { return &nats.Msg{Data: v.Data} }},
		{"its headers, 200 bytes", func(v *nats.Msg) *nats.Msg { return &nats.Msg{Data: payload(200, "answer"), Header: v.Header} }},
		{"without Tenure-Cause/N", func(v *nats.Msg) *nats.Msg {
			return &nats.Msg{Data: v.Data, Header: without(v.Header, events.HeaderCause, events.HeaderIndex)}
		}},
		{"half its body", func(v *nats.Msg) *nats.Msg { return &nats.Msg{Data: v.Data[:len(v.Data)/2], Header: v.Header} }},
	}
	rates := make([][]float64, len(shapes))
	var sdk []float64
	for r := range rounds {
		rate, errs, verdict, err := b.sdkPipeline(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if errs != 0 {
			t.Fatalf("round %d: %d renewal errors", r, errs)
		}
		sdk = append(sdk, rate)
		for k := range shapes {
			i := (k + r) % len(shapes)
			rate, err := b.baselineSDKPipeline(ctx, shapes[i].make(verdict))
			if err != nil {
				t.Fatalf("%s: %v", shapes[i].name, err)
			}
			rates[i] = append(rates[i], rate)
		}
		if r == 0 {
			t.Logf("the verdict: %d-byte body, %d bytes of headers %v", len(verdict.Data), headerBytes(shapedHeader(verdict.Header, 0)), keys(verdict.Header))
		}
		t.Logf("round %d (load %.2f): SDK %.0f/s; %s", r, loadAvg(), rate, fmtRates(shapes, rates, r))
	}
	med := func(xs []float64) float64 {
		s := slices.Clone(xs)
		slices.Sort(s)
		return s[len(s)/2]
	}
	plain := med(rates[0])
	t.Logf("sync %s, %d rounds, medians (ratio to the 200-byte answers; the SDK path's ratio to each):", sync, rounds)
	t.Logf("  %-24s %8.0f/s", "the SDK path", med(sdk))
	for i, s := range shapes {
		m := med(rates[i])
		t.Logf("  %-24s %8.0f/s  %.2f  SDK %.2f", s.name, m, ratio(m, plain), ratio(med(sdk), m))
	}
}

func keys(h nats.Header) []string {
	var ks []string
	for k := range h {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// shape makes an answer from the verdict v (nil: 200 bytes, no headers).
type shape struct {
	name string
	make func(v *nats.Msg) *nats.Msg
}

func fmtRates(shapes []shape, rates [][]float64, r int) string {
	s := ""
	for i := range shapes {
		s += fmt.Sprintf("%s %.0f; ", shapes[i].name, rates[i][r])
	}
	return s
}
