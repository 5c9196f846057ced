// Command simple-worker is an example Tenure worker: acquire or accept, work, report,
// complete, one job at a time, logging each step and how each job ended.
//
// The first SIGTERM or SIGINT (Ctrl-C) lets the running job finish for up to --drain and
// takes no more offers; then, or at a second signal, it stops the job and releases its
// lease, so that another worker may take the job at once.
//
//	go run ./examples/simple-worker                                  # tenure serve on 127.0.0.1:4222
//	go run ./examples/simple-worker --creds-json auth/w1.creds.json  # as worker w1 of tenure auth init
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/maknow/tenure/auth"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/worker"
	"github.com/nats-io/nats.go"
)

func main() {
	credsJSON := flag.String("creds-json", "", "the credential `FILE` tenure auth init wrote for this worker (DIR/<id>.creds.json)")
	id := flag.String("id", "", "worker id (default: the credential's name, else example-worker)")
	drain := flag.Duration("drain", 30*time.Second, "at the first SIGTERM or SIGINT, how long the running job may finish before it is stopped")
	flag.Parse()
	nc, name, err := connect(*credsJSON)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	w, err := worker.Connect(nc, cmp.Or(*id, name, "example-worker"))
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	draining, ctx := signals(*drain)
	l, err := w.Acquire(ctx, "example-job", worker.WithLeaseDuration(10*time.Second))
	for {
		if err == nil {
			work(ctx, l)
		} else {
			log.Print(err) // e.g. errors.Is(err, worker.ErrLeaseHeld): someone else has it
		}
		if draining.Err() != nil {
			break
		}
		select { // then take the offers addressed to this worker
		case o := <-w.Offers():
			l, err = o.Accept(ctx)
		case <-draining.Done():
		}
	}
	for { // decline what was offered meanwhile, so that it goes elsewhere at once
		select {
		case o := <-w.Offers():
			log.Printf("%s: declined: %v", o.Token().Job, o.Decline(context.Background()))
		default:
			log.Print("stopped")
			return
		}
	}
}

// signals returns draining, which ends at the first SIGTERM or SIGINT, and ctx, which
// ends timeout after it or at a second signal.
func signals(timeout time.Duration) (draining, ctx context.Context) {
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	draining, startDrain := context.WithCancel(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		log.Printf("%v: taking no more jobs; the running one may finish for %v (signal again to stop it now)", <-sig, timeout)
		startDrain()
		select {
		case s := <-sig:
			log.Printf("%v: stopping now", s)
		case <-time.After(timeout):
			log.Print("the drain's time is up: stopping now")
		}
		cancel()
	}()
	return draining, ctx
}

func work(ctx context.Context, l *worker.Lease) {
	job := l.Job()
	log.Printf("%s: working under %s", job, l.Token()) // pass l.Token() to every side effect
	for p := 25; p <= 100 && l.Context().Err() == nil; p += 25 {
		select { // one unit of work
		case <-time.After(time.Second):
			if err := l.Progress(ctx, p); err != nil {
				log.Printf("%s: progress %d%% not recorded: %v", job, p, err)
			} else {
				log.Printf("%s: progress %d%%", job, p)
			}
		case <-l.Context().Done(): // authority lost: stop at once
		case <-ctx.Done(): // told to stop: give the lease back
			log.Printf("%s: stopped, lease released: %v", job, errOrOK(l.Release(context.Background())))
			return
		}
	}
	switch cause := context.Cause(l.Context()); {
	case errors.Is(cause, worker.ErrCancelRequested):
		err := errors.Join(l.AckCancel(ctx), l.Complete(ctx, events.OutcomeCancelled, ""))
		log.Printf("%s: cancelled on request: %v", job, errOrOK(err))
	case cause != nil:
		log.Printf("%s: authority lost, nothing reported: %v", job, cause)
	default:
		log.Printf("%s: completed: %v", job, errOrOK(l.Complete(ctx, events.OutcomeSuccess, "")))
	}
}

// errOrOK is err, or "ok" when nil, for a log line.
func errOrOK(err error) any {
	if err == nil {
		return "ok"
	}
	return err
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
