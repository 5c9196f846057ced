// Command gorenew measures Lease.Renew round trips through the Go worker
// SDK: the Go counterpart of sdk/ts/bench/renew.ts, which runs both
// against the same tenure serve and prints them side by side.
//
//	go run ./sdk/ts/bench/gorenew -url nats://127.0.0.1:4222 -n 2000
//
// It prints one JSON object: the round trips' count, p50, p99, mean and
// max in microseconds.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/maknow/tenure/worker"
)

func main() {
	url := flag.String("url", nats.DefaultURL, "NATS server of a running tenure serve")
	n := flag.Int("n", 2000, "renewals measured")
	warm := flag.Int("warmup", 200, "renewals before measuring")
	id := flag.String("id", fmt.Sprintf("gobench-%d", os.Getpid()), "worker id")
	samples := flag.Bool("samples", false, "also print every round trip (samples_us, in the order measured)")
	flag.Parse()
	if err := run(*url, *id, *n, *warm, *samples); err != nil {
		fmt.Fprintln(os.Stderr, "gorenew:", err)
		os.Exit(1)
	}
}

func run(url, id string, n, warm int, samples bool) error {
	if n < 1 || warm < 0 {
		return fmt.Errorf("-n %d -warmup %d: want n >= 1, warmup >= 0", n, warm)
	}
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	w, err := worker.Connect(nc, id)
	if err != nil {
		return err
	}
	defer w.Close()
	ctx := context.Background()
	// Ten minutes: the automatic renewal (a third of it) never runs during the measurement.
	l, err := w.Acquire(ctx, fmt.Sprintf("%s-job", id), worker.WithLeaseDuration(10*time.Minute))
	if err != nil {
		return err
	}
	for range warm {
		if err := l.Renew(ctx); err != nil {
			return err
		}
	}
	rts := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		if err := l.Renew(ctx); err != nil {
			return err
		}
		rts = append(rts, time.Since(t0))
	}
	if err := l.Release(ctx); err != nil {
		return err
	}
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	out := map[string]any{"sdk": "go", "n": n}
	if samples {
		s := make([]float64, n)
		for i, d := range rts {
			s[i] = us(d)
		}
		out["samples_us"] = s
	}
	slices.Sort(rts)
	var sum time.Duration
	for _, d := range rts {
		sum += d
	}
	out["p50_us"], out["p99_us"] = us(rts[n/2]), us(rts[n*99/100])
	out["mean_us"], out["max_us"] = us(sum/time.Duration(n)), us(rts[n-1])
	return json.NewEncoder(os.Stdout).Encode(out)
}
