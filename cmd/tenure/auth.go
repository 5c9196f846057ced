package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"golang.org/x/crypto/bcrypt"

	"github.com/maknow/tenure/auth"
	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/streams"
	"github.com/maknow/tenure/ui"
)

// maxGenerated bounds --workers and --dispatchers.
const maxGenerated = 10000

var authCmd = &command{
	name:    "auth",
	summary: "write a nats-server authorization binding each actor to its subjects (auth init)",
	usage:   "tenure auth init --out DIR [flags]",
	help: `Identity in Tenure comes from the subject an input is published on, so the
server's permissions are what keep one actor from speaking for another:
tenure auth init writes a nats-server authorization that binds every
worker, dispatcher, operator, archivist and coordinator to its own subjects
(workers in an account whose limits cannot crowd out the coordinator), with
one credential file per actor.`,
	subs: []*command{authInitCmd},
	run:  runAuth,
}

var authInitCmd = &command{
	name:    "auth init",
	summary: "write a nats-server authorization (server.conf), one credential per actor, and optionally a CA with TLS certificates",
	usage:   "tenure auth init --out DIR [--workers N | --worker w1,w2] [--dispatchers M | --dispatcher d1] [--operators o1] [--archivists a1] [--coordinators c1] [--admin NAME] [--board NAME] [--partitions N] [--nkeys] [--tls] [--force]",
	help: `Writes DIR/server.conf (a nats-server authorization binding every actor to its subjects),
one DIR/<name>.creds.json per actor (and <name>.nk with --nkeys), and with --tls a CA and
certificates; and for the web board, its tokens (` + ui.OperatorTokenFile + `, ` + ui.ViewerTokenFile + `)
and the ops user its operator actions publish as (board by default). Every file is mode 0600.
Existing files are not overwritten without --force.`,
	run: runAuthInit,
}

// runAuth dispatches `tenure auth <subcommand>`; fs, which has no flags,
// prints auth's help.
func runAuth(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fs.Usage()
		return errUsage
	}
	switch {
	case args[0] == "init":
		return authInitCmd.exec(ctx, args[1:], stdout, stderr)
	case isHelp(args[0]):
		fs.Usage()
		return flag.ErrHelp
	}
	fmt.Fprintf(stderr, "tenure auth: unknown subcommand %q\n", args[0])
	fs.Usage()
	return errUsage
}

// names is a comma-separated list flag of actor names, repeatable.
type names []string

func (n *names) String() string { return strings.Join(*n, ",") }

func (n *names) Set(s string) error {
	for _, v := range strings.Split(s, ",") {
		v = strings.TrimSpace(v)
		if !events.ValidToken(v) {
			return fmt.Errorf("invalid name %q: want 1 to %d of [A-Za-z0-9_-], not %q", v, events.MaxTokenLen, events.NoJob)
		}
		*n = append(*n, v)
	}
	return nil
}

// hosts is a comma-separated list flag of TLS host names, repeatable.
type hosts []string

func (h *hosts) String() string { return strings.Join(*h, ",") }

func (h *hosts) Set(s string) error {
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*h = append(*h, v)
		}
	}
	return nil
}

func runAuthInit(_ context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	out := fs.String("out", "", "directory to write into (required; created with mode 0700)")
	var workers, dispatchers, operators, coordinators, archivists names
	nWorkers := fs.Int("workers", 0, "generate N workers named w1..wN")
	fs.Var(&workers, "worker", "worker names, comma-separated (instead of --workers)")
	nDispatchers := fs.Int("dispatchers", 0, "generate M dispatchers named disp1..dispM")
	fs.Var(&dispatchers, "dispatcher", "dispatcher names, comma-separated (instead of --dispatchers)")
	fs.Var(&operators, "operators", "operator names, comma-separated (same permissions as dispatchers)")
	fs.Var(&archivists, "archivists", "archivist names, comma-separated: the operators' credential of tenure log (archive, remove, restore), the only one that may purge the streams")
	fs.Var(&coordinators, "coordinators", "coordinator `NAMES`, comma-separated; each is the --id of a tenure serve (default coord)")
	board := fs.String("board", "board", "name of the web board's ops user, whose credential its operator actions publish as (tenure serve --ui-actions --ui-credential); --board= writes neither it nor the board's tokens")
	admin := fs.String("admin", "admin", "name of the administrator: the operator's key of the deployment's streams (tenure genesis on a brand-new deployment, stream edits), not for daily use")
	useNKeys := fs.Bool("nkeys", false, "authenticate with nkeys (a seed file per actor) instead of bcrypt-hashed passwords")
	useTLS := fs.Bool("tls", false, "generate a CA, a server certificate and client certificates, and require TLS")
	verify := fs.Bool("tls-verify", true, "with --tls: require a client certificate from the CA (verify: true)")
	var tlsHosts hosts
	fs.Var(&tlsHosts, "tls-hosts", "with --tls: more DNS names or IPs for the server certificate, comma-separated (always: localhost, 127.0.0.1, ::1)")
	url := fs.String("url", "", "server URL written into the credentials (default "+auth.DefaultURL+", with --tls "+auth.DefaultTLSURL+")")
	prefix := fs.String("stream-prefix", streams.DefaultPrefix, "stream prefix of the topology")
	partitions := fs.Uint("partitions", 0, "partition count of a partitioned deployment (tenure serve --partitions N): permissions on every partition's streams, and the input mapping (0: unpartitioned)")
	cost := fs.Int("bcrypt-cost", bcrypt.DefaultCost, "bcrypt cost of the password hashes")
	force := fs.Bool("force", false, "overwrite existing files (every secret and certificate is regenerated)")
	noQuotas := fs.Bool("no-quotas", false, "no per-worker quotas: workers publish straight into the input stream (PROTOCOL.md §4.2)")
	qBytes := fs.Int64("quota-bytes", streams.DefaultQuotaBytes, "each worker's intake stream: at most this many bytes of inputs not yet folded")
	qMsgs := fs.Int64("quota-msgs", streams.DefaultQuotaMsgs, "each worker's intake stream: at most this many inputs not yet folded")
	qBytesPerS := fs.Int64("quota-bytes-per-s", streams.DefaultQuotaBytesPerS, "each worker's long-run rate of inputs in bytes a second (the coordinator empties its intake no faster)")
	qMsgsPerS := fs.Int64("quota-msgs-per-s", streams.DefaultQuotaMsgsPerS, "each worker's long-run rate of inputs a second")
	storeLimit := fs.Int64("store-limit", 0, "JetStream file storage of the deployment's account in bytes (max_file; 0: no account limit), the limit the coordinator keeps its headroom against; keep it below the server's max_file_store")
	if err := parse(fs, args); err != nil {
		return err
	}
	var errs []error
	usage := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if *out == "" {
		usage("--out is required")
	}
	expand := func(flagN, flagNames, prefix string, n int, list names) names {
		switch {
		case n < 0 || n > maxGenerated:
			usage("--%s must be 0 to %d", flagN, maxGenerated)
		case n > 0 && len(list) > 0:
			usage("--%s and --%s are exclusive", flagN, flagNames)
		case n > 0:
			for i := 1; i <= n; i++ {
				list = append(list, prefix+strconv.Itoa(i))
			}
		}
		return list
	}
	workers = expand("workers", "worker", "w", *nWorkers, workers)
	dispatchers = expand("dispatchers", "dispatcher", "disp", *nDispatchers, dispatchers)
	if len(coordinators) == 0 {
		coordinators = names{"coord"}
	}
	if *board != "" && !events.ValidToken(*board) {
		usage("--board: invalid name %q: want 1 to %d of [A-Za-z0-9_-], not %q", *board, events.MaxTokenLen, events.NoJob)
	}
	if *partitions > events.MaxPartitions {
		usage("--partitions: at most %d", events.MaxPartitions)
	}
	if len(tlsHosts) > 0 && !*useTLS {
		usage("--tls-hosts needs --tls")
	}
	var quotas *streams.Quotas
	if !*noQuotas && *partitions == 0 {
		quotas = &streams.Quotas{MaxBytes: *qBytes, MaxMsgs: *qMsgs, BytesPerS: *qBytesPerS, MsgsPerS: *qMsgsPerS}
		if *qBytes <= 0 || *qMsgs <= 0 || *qBytesPerS <= 0 || *qMsgsPerS <= 0 {
			usage("--quota-bytes, --quota-msgs, --quota-bytes-per-s and --quota-msgs-per-s must be positive (or --no-quotas)")
		}
	}
	if *storeLimit < 0 {
		usage("--store-limit must not be negative")
	}
	actors := []auth.Actor{{Name: *admin, Role: auth.RoleAdmin}}
	for _, g := range []struct {
		role auth.Role
		list names
	}{{auth.RoleCoordinator, coordinators}, {auth.RoleDispatcher, dispatchers}, {auth.RoleOperator, operators}, {auth.RoleArchivist, archivists}, {auth.RoleWorker, workers}} {
		for _, n := range g.list {
			actors = append(actors, auth.Actor{Name: n, Role: g.role})
		}
	}
	if *board != "" {
		// The board's operator actions are ops inputs: an operator of its
		// own, so that they publish as nobody else.
		actors = append(actors, auth.Actor{Name: *board, Role: auth.RoleOperator})
	}
	if err := auth.ValidateActors(actors); err != nil {
		usage("%v", strings.TrimPrefix(err.Error(), "auth: "))
	}
	if len(errs) > 0 {
		for _, err := range errs {
			fmt.Fprintln(stderr, "tenure auth init:", err)
		}
		return errUsage
	}
	b, err := auth.Generate(auth.Options{
		Dir: *out, Actors: actors, StreamPrefix: *prefix, URL: *url, NKeys: *useNKeys,
		TLS: *useTLS, TLSVerify: *useTLS && *verify, TLSHosts: tlsHosts, BcryptCost: *cost,
		Partitions: uint32(*partitions), Quotas: quotas, StoreLimit: *storeLimit,
	})
	if err != nil {
		fmt.Fprintln(stderr, "tenure auth init:", strings.TrimPrefix(err.Error(), "auth: "))
		return errUsage
	}
	if *board != "" {
		// The board's tokens, beside the credentials: written (mode
		// 0600, never over an existing file without --force) with them.
		for _, role := range []ui.BoardRole{ui.Operator, ui.Viewer} {
			t, err := ui.NewToken(role)
			if err != nil {
				return err
			}
			b.Files = append(b.Files, auth.File{Name: ui.TokenFile(role), Data: []byte(t.String() + "\n")})
		}
	}
	if err := b.Write(*force); err != nil {
		var exist *auth.ExistError
		if errors.As(err, &exist) {
			return fmt.Errorf("%s exists (and %d more); nothing written: use --force to overwrite (it regenerates every secret)",
				exist.Paths[0], len(exist.Paths)-1)
		}
		return err
	}
	printAuthSummary(stdout, b, *prefix, *board)
	return nil
}

// printAuthSummary is the README of a generated directory (board: the web
// board's ops user, "" for none).
func printAuthSummary(w io.Writer, b *auth.Bundle, prefix, board string) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format+"\n", a...) }
	rel := func(name string) string { return filepath.Join(b.Dir, name) }
	p("# Tenure authorization in %s", b.Dir)
	p("")
	p("Every file is mode 0600; keep the directory private and give each actor only its own files.")
	p("")
	p("  %-34s nats-server accounts: the deployment's, and one per worker; one user per actor, bound to its subjects", auth.ServerConfigFile)
	if b.Partitions > 0 {
		p("  %-34s for %d partitions: permissions on every partition's streams and buckets, and the", "", b.Partitions)
		p("  %-34s input mapping (mappings block) that every server of the deployment needs", "")
	}
	if b.TLS {
		p("  %-34s the private CA that signs everything; %s signs new certificates: keep it offline", auth.CAFile+", "+auth.CAKeyFile, auth.CAKeyFile)
		p("  %-34s the server certificate (localhost, 127.0.0.1, ::1 and --tls-hosts)", auth.ServerCertFile+", "+auth.ServerKeyFile)
		if b.TLSVerify {
			p("  %-34s server requires TLS and a client certificate from the CA (verify: true)", "")
		} else {
			p("  %-34s server requires TLS; client certificates are optional (verify: false)", "")
		}
	}
	p("  %-34s per actor: URL, user and password (or nkey seed file), inbox prefix, TLS files", "<name>"+auth.CredentialSuffix)
	if len(b.Credentials) > 0 && b.Credentials[0].NKeySeedFile != "" {
		p("  %-34s per actor: its nkey seed (the server only has the public key)", "<name>"+auth.NKeySuffix)
	} else {
		p("  %-34s (the server only has bcrypt hashes of the passwords)", "")
	}
	if b.TLS {
		p("  %-34s per actor: its client certificate and key", "<name>"+auth.CertSuffix+", <name>"+auth.KeySuffix)
	}
	if board != "" {
		p("  %-34s the web board's tokens (256 random bits each), operator's and viewer's:", ui.OperatorTokenFile)
		p("  %-34s log in with one (\"Web board\" below); %s is the ops user of its actions", ui.ViewerTokenFile, board+auth.CredentialSuffix)
	}
	p("")
	p("## Actors and permissions")
	p("")
	seen := map[auth.Role]bool{}
	for _, c := range b.Credentials {
		var same []string
		for _, o := range b.Credentials {
			if o.Role == c.Role {
				same = append(same, o.Name)
			}
		}
		if seen[c.Role] {
			continue
		}
		seen[c.Role] = true
		if len(same) > 1 {
			p("%s: %s (permissions of %s; likewise for the others)", c.Role, strings.Join(same, ", "), c.Name)
		} else {
			p("%s: %s", c.Role, c.Name)
		}
		allow := firstPartition(c.Permissions.PublishAllow, prefix)
		if c.Role == auth.RoleWorker {
			lim := auth.DefaultWorkerLimits
			p("  account:         %s, of its own (limits: %d connections, %d subscriptions, messages of %d bytes)",
				c.Account, lim.MaxConnections, lim.MaxSubscriptions, lim.MaxPayload)
			p("  JetStream API:   under %s (jetstream.NewWithAPIPrefix; nats --js-api-prefix), its own consumers only", c.JetStreamAPIPrefix)
			allow = collapseConsumerNames(allow, c.Name)
		} else if c.Account != "" {
			p("  account:         %s", c.Account)
		}
		p("  publish allow:   %s", strings.Join(allow, " "))
		if len(c.Permissions.PublishDeny) > 0 {
			p("  publish deny:    %s", strings.Join(firstPartition(c.Permissions.PublishDeny, prefix), " "))
		}
		p("  subscribe allow: %s", strings.Join(firstPartition(c.Permissions.SubscribeAllow, prefix), " "))
		if b.Partitions > 1 {
			p("  (the %s_P0_ subjects shown stand for those of every partition, %s_P0_ to %s_P%d_)", prefix, prefix, prefix, b.Partitions-1)
		}
		if c.Permissions.AllowResponses {
			p("  allow_responses: true (answers requests on the requester's reply subject)")
		}
		p("")
	}
	if q := b.Quotas; q != nil {
		p("Quotas (PROTOCOL.md §4.2; %s, applied by tenure genesis): each worker's inputs go to an intake stream", auth.QuotasFile)
		p("of its own, %s, sourced into the input stream; the server refuses a worker's input", streams.Topology{Prefix: prefix}.IntakeStream("<worker>"))
		p("past %d bytes or %d inputs not yet folded (worker.ErrQuota), and the coordinator empties each intake", q.MaxBytes, q.MaxMsgs)
		p("at most %d bytes and %d inputs a second, and not at all while storage is short.", q.BytesPerS, q.MsgsPerS)
		if b.StoreLimit > 0 {
			p("The deployment's account may store %d bytes (max_file).", b.StoreLimit)
		}
		p("")
	}
	p("Every client must connect with its own inbox prefix _INBOX_<name> (Go: nats.CustomInboxPrefix;")
	p("nats CLI and tenure commands: --inbox-prefix): it may subscribe to no other inbox.")
	p("")
	p("## Run")
	p("")
	// Secrets never go on a command line (ps shows it to every local
	// user): tenure commands take the credential file, other clients the
	// nkey seed file or the password through the environment.
	credFlag := func(c auth.Credential) string { return "--creds-json " + rel(c.Name+auth.CredentialSuffix) }
	secret := func(c auth.Credential) string {
		if c.NKeySeedFile != "" {
			return "--nkey " + c.NKeySeedFile
		}
		return "--user " + c.User
	}
	secretEnv := func(c auth.Credential) string {
		if c.NKeySeedFile != "" {
			return ""
		}
		return "NATS_PASSWORD=\"$(jq -r .password " + rel(c.Name+auth.CredentialSuffix) + ")\" "
	}
	tlsFlags := func(c auth.Credential) string {
		s := ""
		if c.TLSCAFile != "" {
			s += " --tlsca " + c.TLSCAFile
		}
		if c.TLSCertFile != "" {
			s += " --tlscert " + c.TLSCertFile + " --tlskey " + c.TLSKeyFile
		}
		return s
	}
	pfx := ""
	if prefix != streams.DefaultPrefix {
		pfx = " (stream prefix " + prefix + ": the embedding program's Topology.Prefix)"
	}
	parts := ""
	if b.Partitions > 0 {
		parts = fmt.Sprintf(" --partitions %d", b.Partitions)
	}
	var admin *auth.Credential
	for i, c := range b.Credentials {
		if c.Role == auth.RoleAdmin {
			admin = &b.Credentials[i]
			break
		}
	}
	for _, c := range b.Credentials {
		if c.Role != auth.RoleCoordinator {
			continue
		}
		serve := fmt.Sprintf("tenure serve --server-config %s --id %s %s%s", b.ServerConfigPath(), c.Name, credFlag(c), parts)
		p("Coordinator %s, with the embedded nats-server%s:", c.Name, pfx)
		if admin != nil {
			p("  brand-new deployment, the first start: the coordinator, then (in another shell, once) the administrator's")
			p("  end of the input stream's genesis, which waits for the coordinator's rules and policy, widens the stream")
			p("  and exits; the coordinator says it waits for it, then goes live:")
			p("    %s", serve)
			p("    tenure genesis %s", credFlag(*admin))
			p("  every later start:")
		}
		p("    %s", serve)
		p("  (or, against a nats-server that runs %s: add --nats-url %s, and to tenure genesis too)", auth.ServerConfigFile, c.URL)
	}
	if admin != nil {
		p("")
		p("The administrator %s (%s) may update the deployment's streams, which no coordinator may: keep it", admin.Name, rel(admin.Name+auth.CredentialSuffix))
		p("offline once the deployment is live (a stream edit is an operator's decision; a live coordinator refuses one")
		p("that makes its log less safe).")
	}
	p("")
	for _, c := range b.Credentials {
		if (c.Role == auth.RoleDispatcher || c.Role == auth.RoleOperator) && c.Name != board {
			p("%s %s, from the command line:", c.Role, c.Name)
			p("  tenure offer --as %s %s --job JOB --holder WORKER", c.Name, credFlag(c))
			p("  (and likewise cancel, resolve, policy, watch)")
			p("")
			break
		}
	}
	if c, ok := b.Credential(board); ok && board != "" {
		p("## Web board")
		p("")
		p("The board of tenure serve --http ADDR (or of tenure ui) opens only to a token: log in at its /login with the")
		p("contents of a token file, or send Authorization: Bearer <token> (JSON clients). Add to the coordinator's")
		p("command above:")
		p("  --http 127.0.0.1:8080 --ui-token-file %s --ui-token-file %s", rel(ui.OperatorTokenFile), rel(ui.ViewerTokenFile))
		p("and, for operator actions (cancel, revoke, affirm, settle, retry, discard), published as ops user %s, whose permissions", c.Name)
		p("allow them where the coordinator's do not:")
		p("  --ui-actions --ui-credential %s", rel(c.Name+auth.CredentialSuffix))
		p("  %-22s operator: sees lease ids and payloads, runs audits, and the actions with --ui-actions", ui.OperatorTokenFile)
		p("  %-22s viewer: jobs, states, holders, counters, timelines; no lease id, no payload, no input body", ui.ViewerTokenFile)
		p("/healthz and /metrics stay open and carry counts only. Give a token only to those who may hold its role:")
		p("an operator token shows the lease ids that are a worker's capabilities.")
		p("")
	}
	for _, c := range b.Credentials {
		if c.Role == auth.RoleArchivist {
			p("archivist %s, retention of the log (README \"Retention of the log\"):", c.Name)
			p("  tenure log archive %s --archive DIR", credFlag(c))
			p("  (and likewise remove, restore, status; and tenure audit --archive DIR)")
			p("")
			break
		}
	}
	for _, c := range b.Credentials {
		if c.Role != auth.RoleWorker {
			continue
		}
		p("Worker %s, with the Go SDK:", c.Name)
		p("  cred, err := auth.ReadCredential(%q)", rel(c.Name+auth.CredentialSuffix))
		p("  nc, err := cred.Connect(\"\") // URL, user/password or nkey, inbox prefix, TLS")
		p("  w, err := worker.Connect(nc, %q)", c.Name)
		p("or one of the examples, from a checkout of Tenure:")
		p("  go run ./examples/queue-worker --creds-json %s", rel(c.Name+auth.CredentialSuffix))
		p("or with any NATS client: user %s and its password (or nkey %s), inbox prefix %s, TLS files as in the credential;", c.Name, c.Name+auth.NKeySuffix, c.InboxPrefix)
		p("with the nats CLI (the password from the environment, not the command line):")
		p("  %snats --server %s %s --inbox-prefix %s --js-api-prefix %s%s req tenure.in.worker.%s.JOB.acquire '{\"v\":1}'",
			secretEnv(c), c.URL, secret(c), c.InboxPrefix, c.JetStreamAPIPrefix, tlsFlags(c), c.Name)
		p("(and likewise for the other workers)")
		p("")
		break
	}
	p("Running `tenure auth init` again refuses to overwrite these files; --force regenerates every")
	p("password, nkey and certificate (restart the server with the new server.conf and redistribute).")
	p("")
	p(auth.Limits)
}

// collapseConsumerNames writes a worker's consumer names tw_<name>_0 ...
// tw_<name>_3 in subjects once, as tw_<name>_{0..3}.
func collapseConsumerNames(subjects []string, name string) []string {
	re := regexp.MustCompile(regexp.QuoteMeta(events.WorkerConsumerName(name, 0)[:len(events.WorkerConsumerName(name, 0))-1]) + `[0-9]+`)
	all := fmt.Sprintf("%s{0..%d}", events.WorkerConsumerName(name, 0)[:len(events.WorkerConsumerName(name, 0))-1], events.WorkerConsumers-1)
	var out []string
	seen := map[string]bool{}
	for _, s := range subjects {
		s = re.ReplaceAllLiteralString(s, all)
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// firstPartition leaves out of subjects those that name the streams or
// buckets of a partition other than partition 0 (<prefix>_P<k>_..., k > 0),
// which repeat partition 0's: the summary lists one partition's.
func firstPartition(subjects []string, prefix string) []string {
	re := regexp.MustCompile(regexp.QuoteMeta(prefix) + `_P([0-9]+)_`)
	var out []string
	for _, s := range subjects {
		if m := re.FindStringSubmatch(s); m != nil && m[1] != "0" {
			continue
		}
		out = append(out, s)
	}
	return out
}
