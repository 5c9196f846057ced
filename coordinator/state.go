package coordinator

import (
	"errors"
	"fmt"

	"github.com/maknow/tenure/streams"
)

// States of a coordinator, as Stats.State reports them.
const (
	// StateStarting: the topology (streams, buckets) is not usable yet
	// (a server restarting, a cluster electing its leaders).
	StateStarting = "starting"
	// StateStandby: following the streams and verifying every stored
	// decision; another coordinator holds leadership, or this one is
	// resynchronising after an error (Stats.Reason says which).
	StateStandby = "standby"
	// StateLive: holds leadership and appends decisions.
	StateLive = "live"
	// StateRefused: it will not go live on this log (Run returned the
	// error); Stats.Reason says why and what an operator can do.
	StateRefused = "refused"
)

// state is a coordinator's state and the reason it is not live.
type state struct {
	name, reason string
}

func (c *Coordinator) setState(name, reason string) {
	c.state.Store(&state{name, reason})
}

func (c *Coordinator) currentState() state {
	if s := c.state.Load(); s != nil {
		return *s
	}
	return state{StateStarting, "not started"}
}

// Remedy says what an operator can do about an error that made Run refuse
// to go live ("" for other errors). `tenure serve` logs it and `tenure
// status` shows it.
func Remedy(err error) string {
	var mismatch *streams.ConfigMismatchError
	switch {
	case errors.Is(err, ErrDivergence):
		return "the stored decisions are not what the fold of the stored inputs gives, so appending more " +
			"would build on a history nobody can reproduce; nothing was appended. Run `tenure audit` to see " +
			"every difference (another writer, a restored or tampered store); restore both streams from " +
			"the same backup, or move the data directory aside and start a new log"
	case errors.Is(err, ErrInputGap):
		return "an input sequence is missing from the input stream (removed from the store: the stream " +
			"denies deletes), so no fold can reproduce the decisions made on it; nothing was appended. " +
			"Restore the input stream from a backup, then run `tenure audit`"
	case errors.Is(err, ErrLogRemoved):
		return "a segment of the log was archived and removed (tenure log remove), and the stored snapshot " +
			"that covers it is missing or does not check out; nothing was appended. Put the archive's last " +
			"snapshot back with `tenure log restore --archive DIR`: the coordinator retries and resumes from it"
	case errors.As(err, &mismatch) && mismatch.Field == "DenyPurge" && mismatch.Got == "true":
		return "the streams were created without log retention, and JetStream cannot cancel a stream's DenyPurge: " +
			"run without --log-retention (the deployment keeps its whole log), or create a new deployment with it " +
			"(another stream prefix or data directory)"
	case errors.As(err, &mismatch) && mismatch.Field == "Sealed":
		return "the stream " + mismatch.Stream + " is sealed: it takes no more messages and JetStream cannot unseal it. " +
			"Its log is still whole and readable (run `tenure audit`); find who sealed it (any credential that may update " +
			"the stream: under tenure auth init, a coordinator's or the administrator's), then continue on a new " +
			"deployment (another stream prefix or data directory) and keep auditing the old streams"
	case errors.As(err, &mismatch):
		return "a stream or bucket exists with a configuration Tenure cannot use (" + mismatch.Error() +
			"): fix it with `nats stream edit`, or use another stream prefix"
	}
	return ""
}

// refusal is the Stats.Reason of a refused coordinator.
func refusal(err error) string {
	if r := Remedy(err); r != "" {
		return fmt.Sprintf("%v. What to do: %s", err, r)
	}
	return err.Error()
}
