package auth_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
	"golang.org/x/crypto/bcrypt"

	"github.com/maknow/tenure/auth"
	"github.com/maknow/tenure/internal/testutil"
	"github.com/maknow/tenure/streams"
)

func TestDocs(t *testing.T) { testutil.RequireDocs(t, ".") }

func TestGenerateRejects(t *testing.T) {
	t.Parallel()
	w := func(name string) auth.Actor { return auth.Actor{Name: name, Role: auth.RoleWorker} }
	for _, tc := range []struct {
		name string
		opts auth.Options
		want string
	}{
		{"no dir", auth.Options{Dir: "", Actors: []auth.Actor{w("w1")}}, "directory"},
		{"no actors", auth.Options{}, "no actors"},
		{"empty name", auth.Options{Actors: []auth.Actor{w("")}}, "invalid actor name"},
		{"reserved name", auth.Options{Actors: []auth.Actor{w("_")}}, "invalid actor name"},
		{"dot", auth.Options{Actors: []auth.Actor{w("w.1")}}, "invalid actor name"},
		{"star", auth.Options{Actors: []auth.Actor{w("*")}}, "invalid actor name"},
		{"gt", auth.Options{Actors: []auth.Actor{w(">")}}, "invalid actor name"},
		{"space", auth.Options{Actors: []auth.Actor{w("w 1")}}, "invalid actor name"},
		{"too long", auth.Options{Actors: []auth.Actor{w(strings.Repeat("a", 65))}}, "invalid actor name"},
		{"unknown role", auth.Options{Actors: []auth.Actor{{Name: "x", Role: "root"}}}, "unknown role"},
		{"duplicate across roles", auth.Options{Actors: []auth.Actor{w("x"), {Name: "x", Role: auth.RoleDispatcher}}}, "used twice"},
		{"verify without tls", auth.Options{Actors: []auth.Actor{w("w1")}, TLSVerify: true}, "TLSVerify"},
		{"bad prefix", auth.Options{Actors: []auth.Actor{w("w1")}, StreamPrefix: "A.B"}, "prefix"},
		{"bad tls host", auth.Options{Actors: []auth.Actor{w("w1")}, TLS: true, TLSHosts: []string{"a b"}}, "TLS host"},
		{"bad bcrypt cost", auth.Options{Actors: []auth.Actor{w("w1")}, BcryptCost: 99}, "bcrypt cost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.opts.Dir == "" && tc.name != "no dir" {
				tc.opts.Dir = t.TempDir()
			}
			_, err := auth.Generate(tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// Every file is 0600 in a 0700 directory; a second run refuses to overwrite
// anything (and writes nothing) unless forced.
func TestWriteModesAndOverwrite(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "auth")
	b := generate(t, auth.Options{Dir: dir, TLS: true, TLSVerify: true, NKeys: true})
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("directory mode %v", fi.Mode().Perm())
	}
	want := []string{"server.conf", "ca.pem", "ca-key.pem", "server-cert.pem", "server-key.pem"}
	for _, a := range actors {
		want = append(want, a.Name+".nk", a.Name+".cert.pem", a.Name+".key.pem", a.Name+".creds.json")
	}
	var got []string
	for _, f := range b.Files {
		got = append(got, f.Name)
		fi, err := os.Stat(filepath.Join(dir, f.Name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != auth.FileMode {
			t.Errorf("%s: mode %v, want %v", f.Name, fi.Mode().Perm(), auth.FileMode)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("files %v, want %v", got, want)
	}
	conf, _ := os.ReadFile(b.ServerConfigPath())

	b2, err := auth.Generate(auth.Options{Dir: dir, Actors: actors, BcryptCost: 4})
	if err != nil {
		t.Fatal(err)
	}
	err = b2.Write(false)
	var exist *auth.ExistError
	if !errors.As(err, &exist) || len(exist.Paths) != 1+len(actors) { // server.conf and the credentials
		t.Fatalf("second write: %v", err)
	}
	if now, _ := os.ReadFile(b.ServerConfigPath()); string(now) != string(conf) {
		t.Fatal("a refused write changed server.conf")
	}
	if err := b2.Write(true); err != nil {
		t.Fatal(err)
	}
	if now, _ := os.ReadFile(b.ServerConfigPath()); string(now) == string(conf) {
		t.Fatal("a forced write did not replace server.conf")
	}
	if fi, _ := os.Stat(b.ServerConfigPath()); fi.Mode().Perm() != auth.FileMode {
		t.Errorf("replaced server.conf: mode %v", fi.Mode().Perm())
	}
	c, err := auth.ReadCredential(filepath.Join(dir, "w1.creds.json"))
	if err != nil {
		t.Fatal(err)
	}
	if c2, _ := b2.Credential("w1"); c.Password != c2.Password || c.Password == "" {
		t.Fatal("forced write did not replace the credential")
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp") {
			t.Errorf("temporary file left: %s", e.Name())
		}
	}
}

// The server reads the configuration as intended: one user per actor, with
// the bcrypt hash (never the password) or the nkey, and the permissions of
// PermissionsFor.
func TestServerConfig(t *testing.T) {
	t.Parallel()
	for _, nk := range []bool{false, true} {
		t.Run(fmt.Sprint("nkeys=", nk), func(t *testing.T) {
			b := generate(t, auth.Options{NKeys: nk, TLS: true})
			opts, err := server.ProcessConfigFile(b.ServerConfigPath())
			if err != nil {
				t.Fatal(err)
			}
			conf, _ := os.ReadFile(b.ServerConfigPath())
			if opts.TLSConfig == nil || opts.TLSVerify {
				t.Errorf("TLS config %v, verify %v", opts.TLSConfig != nil, opts.TLSVerify)
			}
			got := map[string]*server.Permissions{}
			if nk {
				if len(opts.Nkeys) != len(actors) || len(opts.Users) != 0 {
					t.Fatalf("%d nkey users, %d users", len(opts.Nkeys), len(opts.Users))
				}
				for _, u := range opts.Nkeys {
					for _, c := range b.Credentials {
						if c.NKeyPublic == u.Nkey {
							got[c.Name] = u.Permissions
						}
					}
				}
				for _, c := range b.Credentials {
					seed, err := os.ReadFile(c.NKeySeedFile)
					if err != nil {
						t.Fatal(err)
					}
					kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
					if err != nil {
						t.Fatal(err)
					}
					if pub, _ := kp.PublicKey(); pub != c.NKeyPublic {
						t.Errorf("%s: seed and public key differ", c.Name)
					}
					if strings.Contains(string(conf), strings.TrimSpace(string(seed))) {
						t.Errorf("%s: seed in server.conf", c.Name)
					}
				}
			} else {
				if len(opts.Users) != len(actors) {
					t.Fatalf("%d users", len(opts.Users))
				}
				for _, u := range opts.Users {
					c, ok := b.Credential(u.Username)
					if !ok {
						t.Fatalf("unknown user %s", u.Username)
					}
					if bcrypt.CompareHashAndPassword([]byte(u.Password), []byte(c.Password)) != nil {
						t.Errorf("%s: the hash does not match the password", u.Username)
					}
					if strings.Contains(string(conf), c.Password) {
						t.Errorf("%s: clear password in server.conf", u.Username)
					}
					got[u.Username] = u.Permissions
				}
			}
			for _, a := range actors {
				want, err := auth.PermissionsFor(a, "")
				if err != nil {
					t.Fatal(err)
				}
				p := got[a.Name]
				if p == nil || p.Publish == nil || p.Subscribe == nil {
					t.Fatalf("%s: no permissions", a.Name)
				}
				if !slices.Equal(p.Publish.Allow, want.PublishAllow) || !slices.Equal(p.Publish.Deny, want.PublishDeny) ||
					!slices.Equal(p.Subscribe.Allow, want.SubscribeAllow) || len(p.Subscribe.Deny) != 0 ||
					(p.Response != nil) != want.AllowResponses {
					t.Errorf("%s: server read %+v %+v, want %+v", a.Name, p.Publish, p.Subscribe, want)
				}
			}
		})
	}
}

// Every JetStream API subject in the permissions is one the server (v2.15.2)
// serves: a subset of one of its exported API subjects, not a guess.
func TestPermissionSubjectsAreServerAPI(t *testing.T) {
	t.Parallel()
	api := []string{
		server.JSApiAccountInfo, server.JSApiStreamCreate, server.JSApiStreamUpdate, server.JSApiStreamInfo,
		server.JSApiStreamDelete, server.JSApiStreamPurge, server.JSApiMsgDelete, server.JSApiMsgGet,
		server.JSDirectMsgGet, server.JSDirectGetLastBySubject, server.JSApiConsumerCreate,
		server.JSApiConsumerCreateEx, server.JSApiDurableCreate, server.JSApiConsumerInfo,
		server.JSApiConsumerDelete, fmt.Sprintf(server.JSApiRequestNextT, "*", "*"),
		server.JSApiStreams, server.JSApiStreamList, // the administrator's
	}
	all := append(slices.Clone(actors), auth.Actor{Name: "op", Role: auth.RoleOperator})
	for _, a := range all {
		for _, prefix := range []string{"", "ACME"} {
			p, err := auth.PermissionsFor(a, prefix)
			if err != nil {
				t.Fatal(err)
			}
			subjects := slices.Concat(p.PublishAllow, p.PublishDeny)
			if a.Role == auth.RoleWorker {
				// A worker's account imports them under its API prefix.
				wp := streams.Topology{Prefix: prefix}.WorkerAPIPrefix() + "."
				for i, s := range subjects {
					if rest, ok := strings.CutPrefix(s, wp); ok {
						subjects[i] = "$JS.API." + rest
					} else if strings.HasPrefix(s, "$JS.API.") {
						t.Errorf("%s: %s outside its API prefix %s", a.Name, s, wp)
					}
				}
				for _, im := range auth.WorkerImports(a.Name, prefix, 0) {
					subjects = append(subjects, im.Subject)
				}
			}
			for _, s := range subjects {
				if !strings.HasPrefix(s, "$JS.API.") {
					continue
				}
				if !slices.ContainsFunc(api, func(pat string) bool { return subset(s, pat) }) {
					t.Errorf("%s (%s): %s is no JetStream API subject of the server", a.Name, a.Role, s)
				}
			}
		}
		for _, e := range auth.Exports("", 4) {
			if strings.HasPrefix(e.Subject, "$JS.API.") && !slices.ContainsFunc(api, func(pat string) bool { return subset(e.Subject, pat) }) {
				t.Errorf("export %s is no JetStream API subject of the server", e.Subject)
			}
		}
	}
	// And the prefix is applied.
	p, _ := auth.PermissionsFor(auth.Actor{Name: "w1", Role: auth.RoleWorker}, "ACME")
	if !slices.Contains(p.PublishAllow, "JS.ACME.API.CONSUMER.INFO.ACME_OUT.tw_w1_0") ||
		!slices.Contains(p.PublishAllow, "JS.ACME.API.CONSUMER.CREATE.ACME_OUT.tw_w1_3.tenure.out.w1.>") {
		t.Errorf("prefix ACME: %v", p.PublishAllow)
	}
	// And no stream info: its subjects filter lists every decision subject.
	for _, s := range p.PublishAllow {
		if strings.Contains(s, ".STREAM.") {
			t.Errorf("prefix ACME: a worker may publish %s", s)
		}
	}
}

// subset reports whether every subject matched by s is matched by pattern.
func subset(s, pattern string) bool {
	st, pt := strings.Split(s, "."), strings.Split(pattern, ".")
	for i, p := range pt {
		if p == ">" {
			return len(st) > i
		}
		if i >= len(st) {
			return false
		}
		if p == "*" {
			if st[i] == ">" {
				return false
			}
			continue
		}
		if st[i] != p {
			return false
		}
	}
	return len(st) == len(pt)
}
