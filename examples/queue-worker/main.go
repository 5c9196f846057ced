// Command queue-worker is an example Tenure worker that takes the jobs of a queue: four at
// once, each retried by the queue when it fails, until Ctrl-C.
package main

import (
	"context"
	"errors"
	"log"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/maknow/tenure/worker"
	"github.com/nats-io/nats.go"
)

func main() {
	nc, err := nats.Connect(os.Getenv("NATS_URL"), nats.MaxReconnects(-1)) // "": nats://127.0.0.1:4222
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	w, err := worker.Connect(nc, "example-queue-worker", worker.WithErrorHandler(func(err error) { log.Print(err) }))
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	// Until Ctrl-C; then the capacity is withdrawn, the handlers are cancelled, and the
	// jobs they did not finish are released for another worker.
	if err := w.Run(ctx, "thumbnails", handle, worker.WithConcurrency(4)); err != nil {
		log.Fatal(err)
	}
}

// handle runs one attempt of a job; its return is the attempt's result.
func handle(ctx context.Context, j *worker.Job) error {
	log.Printf("%s: attempt %d of %d, payload %q", j.ID, j.Attempt, j.MaxAttempts, j.Payload)
	if !strings.HasPrefix(j.Payload, "s3://") {
		return worker.Permanent(errors.New("payload is not an object key")) // FAILED, never retried
	}
	for p := 25; p <= 100; p += 25 {
		select { // one unit of work; pass j.Lease.Token() to its side effects
		case <-time.After(time.Second):
			_ = j.Lease.Progress(ctx, p)
		case <-ctx.Done(): // cancelled, revoked, expired, or shutting down: stop at once
			return context.Cause(ctx)
		}
	}
	return nil // SUCCESS; any other error: FAILED, retried after a backoff until max_attempts
}
