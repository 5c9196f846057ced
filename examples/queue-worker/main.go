// Command queue-worker is an example Tenure worker that takes the jobs of a queue
// (thumbnails by default), four at once, each retried by the queue when it fails, and
// logs how each attempt ended.
//
// The first SIGTERM or SIGINT (Ctrl-C) drains it: it withdraws its capacity at once, so
// the queue offers it nothing more, and lets the running jobs finish for up to --drain;
// then, or at a second signal, it cancels them and releases their leases, so that another
// worker (or this one, restarted) takes them at once.
//
//	go run ./examples/queue-worker                                  # tenure serve on 127.0.0.1:4222
//	go run ./examples/queue-worker --creds-json auth/w1.creds.json  # as worker w1 of tenure auth init
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/maknow/tenure/auth"
	"github.com/maknow/tenure/worker"
	"github.com/nats-io/nats.go"
)

func main() {
	credsJSON := flag.String("creds-json", "", "the credential `FILE` tenure auth init wrote for this worker (DIR/<id>.creds.json)")
	id := flag.String("id", "", "worker id (default: the credential's name, else example-queue-worker)")
	queue := flag.String("queue", "thumbnails", "the queue to take jobs from")
	drain := flag.Duration("drain", 30*time.Second, "at the first SIGTERM or SIGINT, how long running jobs may finish before they are cancelled")
	flag.Parse()
	nc, name, err := connect(*credsJSON)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	w, err := worker.Connect(nc, cmp.Or(*id, name, "example-queue-worker"), worker.WithErrorHandler(func(err error) { log.Print(err) }))
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	// The first signal starts the drain, a second one cancels the running jobs at once.
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	draining, startDrain := context.WithCancel(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		log.Printf("%v: taking no more jobs; the running ones may finish for %v (signal again to stop them now)", <-sig, *drain)
		startDrain()
		log.Printf("%v: stopping the running jobs now", <-sig)
		cancel()
	}()
	log.Printf("worker %s taking the jobs of queue %s", w.ID(), *queue)
	err = w.Run(ctx, *queue, handle, worker.WithConcurrency(4), worker.WithDrain(draining, *drain),
		worker.WithResultHandler(func(j *worker.Job, res worker.Result) {
			log.Printf("%s: attempt %d: %s", j.ID, j.Attempt, res)
		}))
	if err != nil {
		log.Fatal(err)
	}
	log.Print("stopped")
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
			if err := j.Lease.Progress(ctx, p); err != nil {
				log.Printf("%s: progress %d%% not recorded: %v", j.ID, p, err)
			}
		case <-ctx.Done(): // cancelled, revoked, expired, or stopped: stop at once
			return context.Cause(ctx)
		}
	}
	return nil // SUCCESS; any other error: FAILED, retried after a backoff until max_attempts
}

// connect connects to NATS_URL (default nats://127.0.0.1:4222), or as the actor of a
// credential file of tenure auth init (its URL unless NATS_URL is set), whose name it
// returns.
func connect(credsJSON string) (*nats.Conn, string, error) {
	if credsJSON == "" {
		nc, err := nats.Connect(os.Getenv("NATS_URL"), nats.MaxReconnects(-1))
		return nc, "", err
	}
	cr, err := auth.ReadCredential(credsJSON)
	if err != nil {
		return nil, "", err
	}
	nc, err := cr.Connect(os.Getenv("NATS_URL"))
	return nc, cr.Name, err
}
