package events

import (
	"strconv"
	"strings"
)

// ValidToken reports whether s may be used as an actor, job, holder or lease
// id: 1 to MaxTokenLen characters of [A-Za-z0-9_-]. The single "_" is
// reserved (NoJob, NoActor) and is not a valid id.
func ValidToken(s string) bool {
	if len(s) == 0 || len(s) > MaxTokenLen || s == NoJob {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// InputSubject builds tenure.in.<role>.<actor>.<job>.<verb>. Use NoJob as the
// job of a tick, a policy or a batch renew. It does not validate its tokens;
// ParseInputSubject does.
func InputSubject(role Role, actor, job string, verb Verb) string {
	return InputPrefix + "." + role.String() + "." + actor + "." + job + "." + verb.String()
}

// InputFilter is the subject filter of all inputs (the input stream's subjects).
const InputFilter = InputPrefix + ".>"

// DecisionFilter is the subject filter of all decisions.
const DecisionFilter = DecisionPrefix + ".>"

// ActorInputFilter is the filter a worker's publish permission is restricted to.
func ActorInputFilter(role Role, actor string) string {
	return InputPrefix + "." + role.String() + "." + actor + ".>"
}

// AddresseeFilter matches every decision addressed to actor.
func AddresseeFilter(actor string) string { return DecisionPrefix + "." + actor + ".>" }

// WorkerConsumers is how many consumers a worker may hold on each decision
// stream, under the names WorkerConsumerName gives: the permissions `tenure
// auth init` writes let a worker create, read, pull from and delete
// consumers of exactly these names, filtered to its own decisions, so that
// no worker can create more (a stream's consumers are a shared resource) or
// touch another's (PROTOCOL.md §4).
const WorkerConsumers = 4

// WorkerConsumerName is the name of consumer i (0 <= i < WorkerConsumers)
// of worker actor on a decision stream: "tw_<actor>_<i>".
func WorkerConsumerName(actor string, i int) string {
	return "tw_" + actor + "_" + strconv.Itoa(i)
}

// WorkerConsumerNames are the WorkerConsumers names of actor's consumers.
func WorkerConsumerNames(actor string) []string {
	names := make([]string, WorkerConsumers)
	for i := range names {
		names[i] = WorkerConsumerName(actor, i)
	}
	return names
}

// JobDecisionFilter matches every decision about job.
func JobDecisionFilter(job string) string { return DecisionPrefix + ".*." + job + ".*" }

// DecisionSubject builds tenure.out.<addressee>.<job>.<kind>.
func DecisionSubject(d *Decision) string {
	return DecisionPrefix + "." + d.Addressee + "." + d.Job.ID + "." + d.Kind.String()
}

// SubjectActor returns the actor token of an input subject that may be
// malformed: its fourth token when the subject starts with tenure.in. and
// that token is a valid token, else "". From rules revision 2 on, the
// rejection of a subject with too many or too few tokens is addressed to it,
// so that its sender learns the verdict.
func SubjectActor(subject string) string {
	const pre = InputPrefix + "."
	if !strings.HasPrefix(subject, pre) {
		return ""
	}
	rest := subject[len(pre):]
	i := strings.IndexByte(rest, '.') // after the role
	if i < 0 {
		return ""
	}
	rest = rest[i+1:]
	if j := strings.IndexByte(rest, '.'); j >= 0 {
		rest = rest[:j]
	}
	if !ValidToken(rest) {
		return ""
	}
	return rest
}

// Subject is a parsed input subject.
type Subject struct {
	Role  Role
	Actor string
	Job   string // NoJob for job-less inputs
	Verb  Verb
}

// ParseInputSubject splits and validates an input subject: six tokens, a
// known role, valid actor and job tokens (or NoJob where the verb allows it),
// a known verb the role may publish.
func ParseInputSubject(subject string) (Subject, error) {
	return ParseInputSubjectAt(subject, CurrentRevision)
}

// ParseInputSubjectAt is ParseInputSubject under rules revision rev: a verb
// that is no input kind of rev (Verb.Since) is an unknown verb.
func ParseInputSubjectAt(subject string, rev uint32) (Subject, error) {
	var tok [6]string
	rest := subject
	for i := 0; i < 6; i++ {
		j := strings.IndexByte(rest, '.')
		if i == 5 {
			if j >= 0 {
				return Subject{}, decodeErr(ReasonBadSubject, "", "too many tokens")
			}
			tok[i] = rest
			break
		}
		if j < 0 {
			return Subject{}, decodeErr(ReasonBadSubject, "", "too few tokens")
		}
		tok[i], rest = rest[:j], rest[j+1:]
	}
	if tok[0] != "tenure" || tok[1] != "in" {
		return Subject{}, decodeErr(ReasonBadSubject, "", "not under "+InputPrefix)
	}
	// Keep every valid part, so that a rejection can still be addressed to
	// its actor and filed under its job; report the first invalid one.
	var s Subject
	var err error
	fail := func(field, detail string) {
		if err == nil {
			err = &DecodeError{Code: ReasonBadSubject, Field: field, Detail: detail}
		}
	}
	role, ok := ParseRole(tok[2])
	if ok {
		s.Role = role
	} else {
		fail("role", "unknown role")
	}
	if ValidToken(tok[3]) {
		s.Actor = tok[3]
	} else {
		fail("actor", "invalid actor token")
	}
	verb, vok := ParseVerb(tok[5])
	if vok && verb.Since() > rev {
		verb, vok = VerbNone, false // not an input kind of this revision
	}
	if vok {
		s.Verb = verb
	}
	switch {
	case tok[4] == NoJob:
		s.Job = NoJob
		if vok && !(verb.JobLess() || verb.Batches(rev)) {
			fail("job", "verb needs a job")
		}
	case ValidToken(tok[4]):
		s.Job = tok[4]
		if vok && verb.JobLess() {
			fail("job", "verb takes no job: use _")
		}
	default:
		fail("job", "invalid job token")
	}
	if !vok {
		fail("verb", "unknown verb")
	}
	if err != nil {
		return s, err
	}
	if !verb.Allowed(role) {
		return s, decodeErr(ReasonWrongRole, "", "%s may not publish %s", role, verb)
	}
	return s, nil
}
