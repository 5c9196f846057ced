package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// DefaultTimeout bounds a Client's request whose ctx has no deadline.
const DefaultTimeout = 5 * time.Second

// ErrNotFound matches the *Error of a request about a job or queue the
// read model does not know (code 404).
var ErrNotFound = errors.New("api: not found")

// ErrNoServer means no server answered: no `tenure serve` runs, or the
// connection's permissions do not reach tenure.api.> (only the ops and
// coordinator roles of `tenure auth init` may request it).
var ErrNoServer = errors.New("api: no server answers " + SubjectsFilter + " (is tenure serve running, and may this user request " + SubjectsFilter + "?)")

// Error is an error answer of the API (ErrorBody): Code 400 a bad request,
// 404 not found (it matches ErrNotFound), 413 a request too large, 503 a
// read model still catching up.
type Error struct {
	Subject     string
	Code        int
	Description string
}

// Error reads "api: <subject>: <code> <description>".
func (e *Error) Error() string {
	return fmt.Sprintf("api: %s: %d %s", e.Subject, e.Code, e.Description)
}

// Is matches ErrNotFound for code 404.
func (e *Error) Is(target error) bool { return target == ErrNotFound && e.Code == 404 }

// Client requests the API over a NATS connection.
type Client struct {
	nc      *nats.Conn
	timeout time.Duration
}

// NewClient returns a client of the API on nc; a request whose ctx has no
// deadline waits at most timeout for its answer (0: DefaultTimeout).
func NewClient(nc *nats.Conn, timeout time.Duration) *Client {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Client{nc: nc, timeout: timeout}
}

// Job returns the projection of job id (JobReply.Projection decodes it).
func (c *Client) Job(ctx context.Context, id string) (JobReply, error) {
	var r JobReply
	err := c.request(ctx, SubjectJob, JobRequest{Job: id}, &r)
	return r, err
}

// Jobs returns a page of jobs.
func (c *Client) Jobs(ctx context.Context, q JobsRequest) (JobsReply, error) {
	var r JobsReply
	err := c.request(ctx, SubjectJobs, q, &r)
	return r, err
}

// Queue returns the stats of queue name.
func (c *Client) Queue(ctx context.Context, name string) (QueueReply, error) {
	var r QueueReply
	err := c.request(ctx, SubjectQueue, QueueRequest{Queue: name}, &r)
	return r, err
}

// Queues returns a page of queues with their stats.
func (c *Client) Queues(ctx context.Context, q QueuesRequest) (QueuesReply, error) {
	var r QueuesReply
	err := c.request(ctx, SubjectQueues, q, &r)
	return r, err
}

// Schedules returns a page of schedules (rules revision 10).
func (c *Client) Schedules(ctx context.Context, q SchedulesRequest) (SchedulesReply, error) {
	var r SchedulesReply
	err := c.request(ctx, SubjectSchedules, q, &r)
	return r, err
}

// Result returns the worker's account of a result of job id (its
// detail): that of the result input at sequence input of the job's
// partition's input stream, or, with input 0, of the job's latest result.
func (c *Client) Result(ctx context.Context, id string, input uint64) (ResultReply, error) {
	var r ResultReply
	err := c.request(ctx, SubjectResult, ResultRequest{Job: id, Input: input}, &r)
	return r, err
}

func (c *Client) request(ctx context.Context, subject string, req, reply any) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	m, err := c.nc.RequestWithContext(ctx, subject, body)
	if errors.Is(err, nats.ErrNoResponders) {
		return ErrNoServer
	}
	if err != nil {
		return fmt.Errorf("api: %s: %w", subject, err)
	}
	if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
		n, _ := strconv.Atoi(code)
		return &Error{Subject: subject, Code: n, Description: m.Header.Get(micro.ErrorHeader)}
	}
	if err := json.Unmarshal(m.Data, reply); err != nil {
		return fmt.Errorf("api: %s: the answer: %w", subject, err)
	}
	return nil
}
