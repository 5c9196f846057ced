package auth

import (
	"fmt"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/streams"
)

// Role is the kind of an actor, which decides its permissions.
type Role string

// The roles. Dispatchers and operators share the input role "ops" and the
// same permissions; they differ only in name and intent.
const (
	RoleWorker      Role = "worker"
	RoleDispatcher  Role = "dispatcher"
	RoleOperator    Role = "operator"
	RoleCoordinator Role = "coordinator"
	// RoleArchivist is the operator credential of tenure log (package
	// archive): it reads both streams and the snapshot bucket, stores a
	// snapshot (tenure log restore), and is the only role that may purge
	// the input and decision streams, which it does only for segments it
	// archived and verified. It publishes no input and no decision.
	RoleArchivist Role = "archivist"
	// RoleAdmin is the operator's key of the deployment's streams (tenure
	// auth init writes one, "admin"), not for daily use: it reads every
	// stream of the deployment and may update their configuration, which
	// no other role may (the end of the input stream's genesis, `tenure
	// genesis`; a `nats stream edit` an operator decides on). It publishes
	// no input and no decision, and may delete, purge or remove messages
	// of no stream.
	RoleAdmin Role = "admin"
)

// inputRole is the role token of the actor's input subjects.
func (r Role) inputRole() (events.Role, error) {
	switch r {
	case RoleWorker:
		return events.RoleWorker, nil
	case RoleDispatcher, RoleOperator:
		return events.RoleOps, nil
	case RoleCoordinator:
		return events.RoleCoord, nil
	case RoleArchivist, RoleAdmin:
		return 0, nil // no input subjects
	}
	return 0, fmt.Errorf("auth: unknown role %q", string(r))
}

// Actor is one participant: a NATS user named after its actor token.
type Actor struct {
	Name string // actor token: 1 to 64 of [A-Za-z0-9_-], not "_"
	Role Role
}

// Permissions are the publish and subscribe permissions of one NATS user, as
// written in the server configuration. In nats-server a deny wins over an
// allow; a subject not allowed is refused.
type Permissions struct {
	PublishAllow   []string
	PublishDeny    []string
	SubscribeAllow []string
	SubscribeDeny  []string
	// AllowResponses lets the user publish one reply to the reply subject
	// of each request it receives (nats-server's allow_responses), which
	// the coordinator's micro service needs to answer other users' inboxes.
	AllowResponses bool
}

// InboxPrefix is the reply-inbox prefix of actor name, "_INBOX_<name>": the
// only inbox its user may subscribe to. Connect with
// nats.CustomInboxPrefix(InboxPrefix(name)).
func InboxPrefix(name string) string { return "_INBOX_" + name }

// ServiceName is the micro service the coordinators register ("tenure").
const ServiceName = "tenure"

// StatusSubjectPrefix is the prefix of a coordinator's status endpoint,
// tenure.status.<coordinator id>.
const StatusSubjectPrefix = "tenure.status"

// APISubjects are the subjects of the state API that tenure serve answers
// (package api, PROTOCOL.md §23): job projections, which carry lease ids,
// and queue stats. Dispatchers, operators and coordinators may request
// them; no worker may (a worker told another's live lease id could claim
// it and freeze the job in an ownership conflict).
const APISubjects = "tenure.api.>"

// PermissionsFor returns the permissions of actor a for the unpartitioned
// topology with stream prefix prefix ("" is streams.DefaultPrefix). The
// package documentation explains them.
func PermissionsFor(a Actor, prefix string) (Permissions, error) {
	return PartitionedPermissionsFor(a, prefix, 0)
}

// PartitionedPermissionsFor returns the permissions of actor a for a
// deployment of partitions partitions (PROTOCOL.md §18) with stream prefix
// prefix: the JetStream API permissions of PermissionsFor on the streams and
// buckets of every partition (TENURE_P<k>_OUT, ...) instead of the
// unpartitioned ones, plus stream info on the unpartitioned decision stream,
// which streams.Discover looks up first (and finds missing); a worker,
// which may read no stream info, may instead send the unanswered look-ups
// of streams.DiscoverWorker (workerProbes). Partitions 0 is
// PermissionsFor.
func PartitionedPermissionsFor(a Actor, prefix string, partitions uint32) (Permissions, error) {
	if !events.ValidToken(a.Name) {
		return Permissions{}, fmt.Errorf("auth: invalid actor name %q: want 1 to %d of [A-Za-z0-9_-], not %q", a.Name, events.MaxTokenLen, events.NoJob)
	}
	role, err := a.Role.inputRole()
	if err != nil {
		return Permissions{}, err
	}
	if partitions > events.MaxPartitions {
		return Permissions{}, fmt.Errorf("auth: %d partitions: at most %d", partitions, events.MaxPartitions)
	}
	switch a.Role {
	case RoleArchivist:
		return archivistPermissions(a, prefix, partitions), nil
	case RoleAdmin:
		return adminPermissions(a, prefix, partitions), nil
	}
	const api = "$JS.API."
	inbox := InboxPrefix(a.Name) + ".>"
	// Denied to everybody but the coordinator; denied explicitly (the allow
	// lists do not grant them anyway) so that the intent is in the file.
	// The patterns are the server's own (JSApiStreamDelete, ...).
	noAdmin := []string{
		api + "STREAM.DELETE.*",
		api + "STREAM.PURGE.*",
		api + "STREAM.UPDATE.*",
		api + "STREAM.MSG.DELETE.*",
		api + "CONSUMER.DELETE.*.*",
	}
	srv := []string{"$SRV.*", "$SRV.*." + ServiceName, "$SRV.*." + ServiceName + ".*"}
	const advisory = "$JS.EVENT.ADVISORY.STREAM.UPDATED."
	base := streams.Topology{Prefix: prefix}
	topos := base.Partitions(partitions)
	var p Permissions
	// discover is the look-up streams.Discover makes first: the
	// unpartitioned decision stream, which a partitioned deployment lacks.
	discover := func() {
		if partitions > 0 {
			p.PublishAllow = append(p.PublishAllow, api+"STREAM.INFO."+base.DecisionStream())
		}
	}
	switch role {
	case events.RoleWorker:
		// In an account of its own (WorkerAccount): it publishes its inputs
		// and the JetStream API subjects its account imports, under the
		// worker API prefix, and nothing else exists there.
		p.PublishAllow = []string{events.ActorInputFilter(role, a.Name)}
		for _, im := range WorkerImports(a.Name, prefix, partitions) {
			if im.To != "" {
				p.PublishAllow = append(p.PublishAllow, im.To)
			}
		}
		p.PublishAllow = append(p.PublishAllow, workerProbes(a.Name, prefix, partitions)...)
		// The chain heads, which its account imports as a stream
		// (HeadStreams), to keep as witnesses; it cannot publish them.
		p.SubscribeAllow = append([]string{inbox}, streams.HeadFilters()...)
	case events.RoleOps:
		p.PublishAllow = []string{events.ActorInputFilter(role, a.Name)}
		discover()
		for _, t := range topos {
			out := t.DecisionStream()
			p.PublishAllow = append(p.PublishAllow,
				api+"STREAM.INFO."+out,
				api+"CONSUMER.CREATE."+out+".>",
				api+"CONSUMER.INFO."+out+".*",
				api+"CONSUMER.MSG.NEXT."+out+".*",
				// The ops client deletes its short-lived consumer after
				// each call; without this they would linger until their
				// inactivity threshold (5 minutes).
				api+"CONSUMER.DELETE."+out+".*",
				api+"STREAM.MSG.GET."+out,
				api+"DIRECT.GET."+out,
				api+"DIRECT.GET."+out+".>",
			)
		}
		p.PublishAllow = append(p.PublishAllow, srv...)
		p.PublishAllow = append(p.PublishAllow, StatusSubjectPrefix+".*", APISubjects)
		if partitions > 0 {
			// A partitioned coordinator's status endpoints,
			// tenure.status.<coordinator id>.<partition>.
			p.PublishAllow = append(p.PublishAllow, StatusSubjectPrefix+".*.*")
		}
		p.PublishDeny = append([]string{events.DecisionFilter}, noAdmin[:4]...)
		p.PublishDeny = append(p.PublishDeny, streams.HeadFilters()...) // the coordinators' signed chain heads
		if a.Role == RoleDispatcher {
			// A schedule (revision 10) is standing authority to submit,
			// in the name of its setter, that outlives the credential
			// that set it: an operator's matter. (A partitioned
			// deployment appends the partition token.)
			sched := events.InputSubject(role, a.Name, "*", events.VerbSchedule)
			p.PublishDeny = append(p.PublishDeny, sched, sched+".*")
		}
		p.SubscribeAllow = append([]string{inbox, events.DecisionFilter}, streams.HeadFilters()...)
	case events.RoleCoord:
		p.PublishAllow = []string{
			events.ActorInputFilter(role, a.Name),
			events.DecisionFilter,
			api + "INFO",
		}
		discover()
		for _, t := range topos {
			in, out := t.InputStream(), t.DecisionStream()
			kvBucket, objBucket := t.LeaderBucket(), t.SnapshotBucket()
			kv, obj := "KV_"+kvBucket, "OBJ_"+objBucket
			for _, s := range []string{in, out, kv, obj} {
				p.PublishAllow = append(p.PublishAllow, api+"STREAM.CREATE."+s)
				p.PublishAllow = append(p.PublishAllow, readStream(s)...)
			}
			p.PublishAllow = append(p.PublishAllow,
				// The leader bucket's TTL follows --leader-ttl
				// (streams.Ensure updates it), and replacing a snapshot
				// purges the old object's chunks: the only stream
				// administration it has, on its two buckets.
				api+"STREAM.UPDATE."+kv,
				api+"STREAM.PURGE."+obj,
				"$KV."+kvBucket+".>", "$O."+objBucket+".>",
				t.HeadSubject()) // its signed chain heads (PROTOCOL.md §20.3)
		}
		p.PublishAllow = append(p.PublishAllow, APISubjects) // the state API, which tenure serve answers
		// No update of the log's streams (the end of the input stream's
		// genesis is the administrator's, RoleAdmin: an update's body can
		// set any limit, which would let this credential trim its own
		// log), no purge, no message delete.
		p.PublishDeny = []string{api + "STREAM.DELETE.*", api + "STREAM.MSG.DELETE.*"}
		for _, t := range topos {
			for _, s := range []string{t.InputStream(), t.DecisionStream()} {
				p.PublishDeny = append(p.PublishDeny,
					api+"STREAM.PURGE."+s,
					api+"STREAM.UPDATE."+s,
				)
			}
		}
		p.SubscribeAllow = append([]string{inbox}, srv...)
		for _, t := range topos {
			// The stream-updated advisories of its log's streams, its
			// watch of their configuration (coordinator.AdvisorySubject).
			p.SubscribeAllow = append(p.SubscribeAllow,
				advisory+t.InputStream(), advisory+t.DecisionStream())
		}
		p.SubscribeAllow = append(p.SubscribeAllow, StatusSubjectPrefix+"."+a.Name, APISubjects)
		if partitions > 0 {
			p.SubscribeAllow = append(p.SubscribeAllow, StatusSubjectPrefix+"."+a.Name+".*")
		}
		p.AllowResponses = true
	}
	return p, nil
}

// withIntakes adds to p, the permissions of an actor of role r, what
// quotas need (streams.Quotas, PROTOCOL.md §4.2): a coordinator looks up
// and purges the intake stream of each worker (it empties them behind its
// fold), the administrator creates, reads and updates them (tenure genesis
// --quotas). A worker needs nothing more: its inputs' subjects are the
// same, and its intake stream takes them. NATS subject tokens cannot hold
// a wildcard inside a stream name, so each intake stream is named.
func withIntakes(p Permissions, r Role, prefix string, workers []string) Permissions {
	const api = "$JS.API."
	t := streams.Topology{Prefix: prefix}
	switch r {
	case RoleCoordinator:
		for _, w := range workers {
			s := t.IntakeStream(w)
			p.PublishAllow = append(p.PublishAllow, api+"STREAM.INFO."+s, api+"STREAM.PURGE."+s)
		}
	case RoleAdmin:
		for _, w := range workers {
			s := t.IntakeStream(w)
			p.PublishAllow = append(p.PublishAllow, api+"STREAM.CREATE."+s, api+"STREAM.INFO."+s, api+"STREAM.UPDATE."+s)
		}
	}
	return p
}

// WorkerAccount is the name of the NATS account of worker name:
// "<stream prefix>_W_<name>". Each worker has an account of its own, with
// limits of its own (WorkerLimits), which imports from the deployment's
// account (DeploymentAccount) only what WorkerImports lists.
func WorkerAccount(name, prefix string) string { return DeploymentAccount(prefix) + "_W_" + name }

// DeploymentAccount is the name of the NATS account of the deployment's
// streams, coordinators, dispatchers and operators: the stream prefix,
// "TENURE" by default.
func DeploymentAccount(prefix string) string {
	if prefix == "" {
		return streams.DefaultPrefix
	}
	return prefix
}

// Export is a service the deployment's account exports to the workers'
// accounts. Stream marks a service that answers with a stream of messages
// (a pull request's deliveries).
type Export struct {
	Subject string
	Stream  bool
}

// Import is a service a worker's account imports from the deployment's
// account: Subject there, To in the worker's account ("" for the same
// subject).
type Import struct {
	Subject, To string
}

// Exports are the services of the deployment's account that workers'
// accounts import from (WorkerImports narrows each to one worker), for a
// deployment of partitions partitions with stream prefix prefix.
func Exports(prefix string, partitions uint32) []Export {
	const api = "$JS.API."
	base := streams.Topology{Prefix: prefix}
	ex := []Export{{Subject: events.InputPrefix + "." + events.RoleWorker.String() + ".>"}}
	for _, t := range base.Partitions(partitions) {
		out := t.DecisionStream()
		ex = append(ex,
			Export{Subject: api + "CONSUMER.CREATE." + out + ".>"},
			Export{Subject: api + "CONSUMER.INFO." + out + ".*"},
			Export{Subject: api + "CONSUMER.DELETE." + out + ".*"},
			Export{Subject: api + "CONSUMER.MSG.NEXT." + out + ".*", Stream: true},
		)
	}
	return ex
}

// HeadStreams are the subjects the deployment's account exports to every
// worker's account as streams (messages flowing one way, to the worker):
// the coordinators' signed chain heads (streams.HeadFilters), which a
// worker may keep as witnesses of the log (PROTOCOL.md §20.3). Nothing a
// worker's account publishes reaches the deployment's account through
// them.
func HeadStreams() []string { return streams.HeadFilters() }

// WorkerImports are the services worker name's account imports: its own
// inputs (tenure.in.worker.<name>.>, PubAcks included), and, under the
// worker API prefix (streams.Topology.WorkerAPIPrefix, JS.TENURE.API by
// default), for each of its events.WorkerConsumers consumer names on each
// decision stream, consumer creation filtered to its own decisions,
// consumer info, deletion and pull requests. Nothing else of the
// deployment's account is reachable from it: no stream info (whose
// subjects filter lists every decision subject: job ids, worker names), no
// core subscription to decisions (which would show the coordinator's reply
// inboxes), no other consumer name (a stream's consumers are a shared
// resource), no input of another actor.
func WorkerImports(name, prefix string, partitions uint32) []Import {
	const api = "$JS.API."
	base := streams.Topology{Prefix: prefix}
	local := base.WorkerAPIPrefix() + "."
	im := []Import{{Subject: events.ActorInputFilter(events.RoleWorker, name)}}
	apiImport := func(sub string) Import { return Import{Subject: api + sub, To: local + sub} }
	for _, t := range base.Partitions(partitions) {
		out := t.DecisionStream()
		for _, c := range events.WorkerConsumerNames(name) {
			im = append(im,
				apiImport("CONSUMER.CREATE."+out+"."+c+"."+events.AddresseeFilter(name)),
				apiImport("CONSUMER.INFO."+out+"."+c),
				apiImport("CONSUMER.DELETE."+out+"."+c),
				apiImport("CONSUMER.MSG.NEXT."+out+"."+c),
			)
		}
	}
	return im
}

// workerProbes are the subjects worker name may publish that its account
// does not import: in a partitioned deployment, the look-ups of its first
// consumer name on the unpartitioned decision stream and on the partition
// stream one past the last (<prefix>_P<partitions>_OUT), under the worker
// API prefix. Nothing answers them ("no responders", at once), which is how
// streams.DiscoverWorker finds, without any stream info, that the
// deployment is partitioned and where its partitions end.
func workerProbes(name, prefix string, partitions uint32) []string {
	if partitions == 0 {
		return nil
	}
	base := streams.Topology{Prefix: prefix}
	past := base
	past.Partition = events.Partition{Index: partitions, Count: partitions + 1}
	c := events.WorkerConsumerName(name, 0)
	local := base.WorkerAPIPrefix() + ".CONSUMER.INFO."
	return []string{local + base.DecisionStream() + "." + c, local + past.DecisionStream() + "." + c}
}

// readStream is the JetStream API a reader of stream s uses: its info,
// message and direct gets, consumers (created with or without a filter,
// read and deleted) with their acks and flow control.
func readStream(s string) []string {
	const api = "$JS.API."
	return []string{
		api + "STREAM.INFO." + s,
		api + "STREAM.MSG.GET." + s,
		api + "DIRECT.GET." + s,
		api + "DIRECT.GET." + s + ".>",
		api + "CONSUMER.CREATE." + s,
		api + "CONSUMER.CREATE." + s + ".>",
		api + "CONSUMER.INFO." + s + ".*",
		api + "CONSUMER.MSG.NEXT." + s + ".*",
		api + "CONSUMER.DELETE." + s + ".*",
		"$JS.ACK." + s + ".>",
		"$JS.FC." + s + ".>",
	}
}

// archivistPermissions are RoleArchivist's: read the input and decision
// streams and purge them, read and store the snapshot object, look up the
// leader bucket (streams.Open does); no input, no decision, no other
// administration (stream deletes, updates, single-message deletes).
func archivistPermissions(a Actor, prefix string, partitions uint32) Permissions {
	const api = "$JS.API."
	base := streams.Topology{Prefix: prefix}
	var p Permissions
	if partitions > 0 {
		p.PublishAllow = append(p.PublishAllow, api+"STREAM.INFO."+base.DecisionStream())
	}
	for _, t := range base.Partitions(partitions) {
		obj := "OBJ_" + t.SnapshotBucket()
		for _, s := range []string{t.InputStream(), t.DecisionStream(), obj} {
			p.PublishAllow = append(p.PublishAllow, readStream(s)...)
			p.PublishAllow = append(p.PublishAllow, api+"STREAM.PURGE."+s) // the object store purges a replaced object's chunks
		}
		p.PublishAllow = append(p.PublishAllow, api+"STREAM.INFO.KV_"+t.LeaderBucket(), "$O."+t.SnapshotBucket()+".>")
	}
	p.PublishDeny = []string{
		events.InputPrefix + ".>", events.DecisionFilter,
		api + "STREAM.DELETE.*", api + "STREAM.UPDATE.*", api + "STREAM.MSG.DELETE.*",
	}
	p.SubscribeAllow = []string{InboxPrefix(a.Name) + ".>"}
	return p
}

// adminPermissions are RoleAdmin's: read every stream of the deployment
// (the input and decision streams, the leader and snapshot buckets' streams)
// and update their configuration, look up the JetStream account and the
// stream names; no input, no decision, no chain head, and no stream delete,
// purge or message delete.
func adminPermissions(a Actor, prefix string, partitions uint32) Permissions {
	const api = "$JS.API."
	base := streams.Topology{Prefix: prefix}
	p := Permissions{PublishAllow: []string{api + "INFO", api + "STREAM.NAMES", api + "STREAM.LIST"}}
	if partitions > 0 {
		p.PublishAllow = append(p.PublishAllow, api+"STREAM.INFO."+base.DecisionStream())
	}
	for _, t := range base.Partitions(partitions) {
		for _, s := range []string{t.InputStream(), t.DecisionStream(), "KV_" + t.LeaderBucket(), "OBJ_" + t.SnapshotBucket()} {
			p.PublishAllow = append(p.PublishAllow, readStream(s)...)
			p.PublishAllow = append(p.PublishAllow, api+"STREAM.UPDATE."+s)
		}
	}
	p.PublishDeny = append([]string{
		events.InputPrefix + ".>", events.DecisionFilter,
		api + "STREAM.DELETE.*", api + "STREAM.PURGE.*", api + "STREAM.MSG.DELETE.*",
	}, streams.HeadFilters()...)
	p.SubscribeAllow = []string{InboxPrefix(a.Name) + ".>"}
	return p
}
