// Command simple-worker is an example Tenure worker: acquire or accept, work, report, complete.
package main

import (
	"context"
	"errors"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/worker"
	"github.com/nats-io/nats.go"
)

func main() {
	nc, err := nats.Connect(os.Getenv("NATS_URL"), nats.MaxReconnects(-1)) // "": nats://127.0.0.1:4222
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	w, err := worker.Connect(nc, "example-worker")
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	l, err := w.Acquire(ctx, "example-job", worker.WithLeaseDuration(10*time.Second))
	for {
		if err == nil {
			work(ctx, l)
		} else {
			log.Print(err) // e.g. errors.Is(err, worker.ErrLeaseHeld): someone else has it
		}
		select { // then take the offers addressed to this worker
		case o := <-w.Offers():
			l, err = o.Accept(ctx)
		case <-ctx.Done():
			return
		}
	}
}

func work(ctx context.Context, l *worker.Lease) {
	for p := 25; p <= 100 && l.Context().Err() == nil; p += 25 {
		select { // one unit of work; pass l.Token() to its side effects
		case <-time.After(time.Second):
			log.Printf("progress %d%%: %v", p, l.Progress(ctx, p))
		case <-l.Context().Done(): // authority lost: stop at once
		}
	}
	if cause := context.Cause(l.Context()); errors.Is(cause, worker.ErrCancelRequested) {
		log.Print("cancelled: ", l.AckCancel(ctx), l.Complete(ctx, events.OutcomeCancelled, ""))
	} else if cause == nil {
		log.Print("completed: ", l.Complete(ctx, events.OutcomeSuccess, ""))
	}
}
