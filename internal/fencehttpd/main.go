// Command fencehttpd is a test server behind fence/httpfence, for the
// TypeScript SDK's tests of its FenceClient: POST /pay/<job> pays (behind
// the fence, the route's job checked), POST /claim claims, GET /paid
// answers how many payments were made. It listens on 127.0.0.1 (a port
// of the system's choice), prints "listening <url>", and stops on
// SIGTERM or when its standard input closes.
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/maknow/tenure/fence/httpfence"
)

func main() {
	var paid atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("POST /pay/{job}", func(w http.ResponseWriter, r *http.Request) {
		paid.Add(1)
		w.WriteHeader(http.StatusCreated)
	})
	h := httpfence.Handler(mux, httpfence.NewMemory("fencehttpd"), func(o *httpfence.Options) {
		o.Job = func(r *http.Request) string {
			job, _ := strings.CutPrefix(r.URL.Path, "/pay/")
			if job == r.URL.Path {
				return ""
			}
			return job
		}
	})
	top := http.NewServeMux()
	top.HandleFunc("GET /paid", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, paid.Load()) })
	top.Handle("/", h)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("listening http://%s\n", ln.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); stop() }()
	srv := &http.Server{Handler: top}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	_ = srv.Serve(ln)
}
