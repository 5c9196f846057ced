package heads_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/maknow/tenure/events"
	"github.com/maknow/tenure/heads"
	"github.com/maknow/tenure/internal/testutil"
)

func TestDocs(t *testing.T) { testutil.RequireDocs(t, ".") }

func newKey(t *testing.T) nkeys.KeyPair {
	t.Helper()
	kp, err := nkeys.CreateServer()
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

func sample() heads.Head {
	var c events.Chain
	for i := range c {
		c[i] = byte(i * 7)
	}
	return heads.Head{
		Stream: "TENURE_OUT", Seq: 42, Chain: c, InputSeq: 17,
		At:          time.Date(2026, 5, 1, 14, 0, 0, 123456789, time.FixedZone("CEST", 2*3600)),
		Coordinator: "c1",
	}
}

func signed(t *testing.T, kp nkeys.KeyPair, h heads.Head) heads.Head {
	t.Helper()
	s, err := heads.Sign(kp, h)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A signed head verifies, travels as one line of JSON with the documented
// fields in order, and parses back to itself.
func TestRoundTrip(t *testing.T) {
	kp := newKey(t)
	pub, _ := kp.PublicKey()
	h := signed(t, kp, sample())
	if h.Key != pub || len(h.Sig) != 64 || h.At.Location() != time.UTC {
		t.Fatalf("signed head %+v", h)
	}
	if err := heads.Verify(h); err != nil {
		t.Fatal(err)
	}
	line, err := h.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"v":1,"stream":"TENURE_OUT","seq":42,"chain":"` + h.Chain.String() + `","input_seq":17,"at":"2026-05-01T12:00:00.123456789Z","coordinator":"c1","key":"` + pub + `","sig":"` + base64.RawURLEncoding.EncodeToString(h.Sig) + `"}`
	if string(line) != want {
		t.Fatalf("JSON\n got %s\nwant %s", line, want)
	}
	p, err := heads.Parse(append(line, '\n'))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p, h) {
		t.Fatalf("parsed\n %+v\nsigned\n %+v", p, h)
	}
	if err := heads.Verify(p); err != nil {
		t.Fatal(err)
	}
	// The signed bytes are the documented layout.
	b := h.SignedBytes()
	if !bytes.HasPrefix(b, []byte("tenure head v1\x00\x00\x00\x00\x0aTENURE_OUT\x00\x00\x00\x00\x00\x00\x00\x2a")) ||
		!bytes.HasSuffix(b, []byte("\x00\x00\x00\x02c1")) || len(b) != 15+4+10+8+32+8+8+4+2 {
		t.Fatalf("signed bytes %q", b)
	}
	// Unmarshalling is Parse.
	var u heads.Head
	if err := u.UnmarshalJSON(line); err != nil || !reflect.DeepEqual(u, h) {
		t.Fatalf("UnmarshalJSON: %v %+v", err, u)
	}
}

// Any field changed after signing, and any other key, fails Verify with
// ErrSignature.
func TestTampered(t *testing.T) {
	kp := newKey(t)
	h := signed(t, kp, sample())
	other, _ := newKey(t).PublicKey()
	for name, tamper := range map[string]func(*heads.Head){
		"stream":      func(h *heads.Head) { h.Stream = "TENURE_P1_OUT" },
		"seq":         func(h *heads.Head) { h.Seq++ },
		"chain":       func(h *heads.Head) { h.Chain[31] ^= 1 },
		"input_seq":   func(h *heads.Head) { h.InputSeq-- },
		"at":          func(h *heads.Head) { h.At = h.At.Add(time.Nanosecond) },
		"coordinator": func(h *heads.Head) { h.Coordinator = "c2" },
		"key":         func(h *heads.Head) { h.Key = other },
		"sig":         func(h *heads.Head) { h.Sig = append([]byte(nil), h.Sig...); h.Sig[0] ^= 1 },
	} {
		x := h
		tamper(&x)
		if err := heads.Verify(x); !errors.Is(err, heads.ErrSignature) {
			t.Errorf("%s changed: Verify %v, want ErrSignature", name, err)
		}
	}
	// A head signed by another kind of key does not exist: Sign refuses it.
	user, _ := nkeys.CreateUser()
	if _, err := heads.Sign(user, sample()); err == nil {
		t.Error("signed with a user nkey")
	}
	pubOnly, _ := nkeys.FromPublicKey(h.Key)
	if _, err := heads.Sign(pubOnly, sample()); err == nil {
		t.Error("signed with a public key")
	}
	bad := sample()
	bad.Seq = 0
	if _, err := heads.Sign(kp, bad); !errors.Is(err, heads.ErrMalformed) {
		t.Errorf("signed seq 0: %v", err)
	}
}

// Parse is strict: each deviation from the documented JSON is an error
// wrapping ErrMalformed that names the problem.
func TestParseStrict(t *testing.T) {
	h := signed(t, newKey(t), sample())
	line, _ := h.MarshalJSON()
	good := string(line)
	if _, err := heads.Parse(line); err != nil {
		t.Fatal(err)
	}
	sig := base64.RawURLEncoding.EncodeToString(h.Sig)
	userKey, _ := nkeys.CreateUser()
	userPub, _ := userKey.PublicKey()
	replace := func(old, new string) string {
		if !strings.Contains(good, old) {
			t.Fatalf("no %q in %s", old, good)
		}
		return strings.Replace(good, old, new, 1)
	}
	for name, c := range map[string]struct{ line, want string }{
		"not json":      {"head", "not a JSON object"},
		"trailing":      {good + " {}", "not a JSON object"},
		"array":         {"[" + good + "]", "not a JSON object"},
		"unknown field": {replace(`"v":1,`, `"v":1,"extra":true,`), `unknown field "extra"`},
		"case variant":  {replace(`"seq":`, `"SEQ":`), `unknown field "SEQ"`},
		"missing field": {replace(`"input_seq":17,`, ``), `no "input_seq" field`},
		"version":       {replace(`"v":1`, `"v":2`), "version 2"},
		"seq type":      {replace(`"seq":42`, `"seq":"42"`), "cannot unmarshal"},
		"seq 0":         {replace(`"seq":42`, `"seq":0`), "seq 0"},
		"input_seq 0":   {replace(`"input_seq":17`, `"input_seq":0`), "input_seq 0"},
		"upper hex":     {replace(h.Chain.String(), strings.ToUpper(h.Chain.String())), "64 lower-case hexadecimal"},
		"short chain":   {replace(h.Chain.String(), h.Chain.String()[2:]), "64 lower-case hexadecimal"},
		"zone":          {replace(`12:00:00.123456789Z`, `14:00:00.123456789+02:00`), "RFC 3339 time in UTC"},
		"not canonical": {replace(`12:00:00.123456789Z`, `12:00:00.100Z`), "RFC 3339 time in UTC"},
		"bad time":      {replace(`2026-05-01T12`, `2026-05-01 12`), "RFC 3339 time in UTC"},
		"padded sig":    {replace(sig, sig+"=="), "base64url"},
		"std base64":    {replace(sig, base64.RawStdEncoding.EncodeToString(bytes.Repeat([]byte{0xfb}, 64))), "base64url"},
		"short sig":     {replace(sig, sig[:40]), "sig: 30 bytes"},
		"user key":      {replace(h.Key, userPub), "not a public server nkey"},
		"bad key":       {replace(h.Key, flipLast(h.Key)), "not a public server nkey"},
		"stream":        {replace(`"TENURE_OUT"`, `"TENURE.OUT"`), "stream"},
		"coordinator":   {replace(`"coordinator":"c1"`, `"coordinator":"c 1"`), "coordinator"},
	} {
		_, err := heads.Parse([]byte(c.line))
		if !errors.Is(err, heads.ErrMalformed) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Parse %v, want ErrMalformed with %q", name, err, c.want)
		}
	}
}

// flipLast changes the last character of a key (its checksum then fails).
func flipLast(k string) string {
	last := "A"
	if strings.HasSuffix(k, "A") {
		last = "B"
	}
	return k[:len(k)-1] + last
}

// LoadOrCreateKey creates a private key file once and loads it after;
// it refuses a file others can read and one that holds no server seed.
func TestKeyFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "head.nk")
	kp, created, err := heads.LoadOrCreateKey(path)
	if err != nil || !created {
		t.Fatalf("create: %v, created %v", err, created)
	}
	pub, _ := kp.PublicKey()
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi.Mode(), err)
	}
	b, _ := os.ReadFile(path)
	if !bytes.HasPrefix(b, []byte("SN")) || !bytes.HasSuffix(b, []byte("\n")) {
		t.Fatalf("key file holds %d bytes, not a server seed line", len(b))
	}
	kp2, created, err := heads.LoadOrCreateKey(path)
	if err != nil || created {
		t.Fatalf("second run: %v, created %v", err, created)
	}
	if pub2, _ := kp2.PublicKey(); pub2 != pub {
		t.Fatalf("second run gave key %s, first %s", pub2, pub)
	}
	if _, err := heads.Sign(kp2, sample()); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Fatalf("files left beside the key: %v", ents)
	}

	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := heads.LoadOrCreateKey(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("world-readable key: %v", err)
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := heads.LoadKey(path); err == nil {
		t.Fatal("group-readable key accepted")
	}

	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	user, _ := nkeys.CreateUser()
	useed, _ := user.Seed()
	for name, c := range map[string]struct {
		data []byte
		want string
	}{
		"garbage":   {[]byte("not a seed\n"), "does not hold an nkey seed"},
		"empty":     {nil, "does not hold an nkey seed"},
		"user seed": {useed, "holds a user seed"},
		"public":    {[]byte(pub), "does not hold an nkey seed"},
	} {
		p := write(name, c.data)
		if _, _, err := heads.LoadOrCreateKey(p); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
		if b, _ := os.ReadFile(p); !bytes.Equal(b, c.data) {
			t.Errorf("%s: the file was changed", name)
		}
	}
	if _, _, err := heads.LoadOrCreateKey(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a directory: %v", err)
	}
}

// Processes racing to create the key all end up with the one key that was
// linked first.
func TestKeyFileRace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "head.nk")
	const n = 8
	pubs := make([]string, n)
	made := make([]bool, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			kp, created, err := heads.LoadOrCreateKey(path)
			if err != nil {
				t.Error(err)
				return
			}
			pubs[i], _ = kp.PublicKey()
			made[i] = created
		})
	}
	wg.Wait()
	creators := 0
	for i := range n {
		if pubs[i] != pubs[0] {
			t.Errorf("run %d got key %s, run 0 %s", i, pubs[i], pubs[0])
		}
		if made[i] {
			creators++
		}
	}
	if creators != 1 {
		t.Errorf("%d runs created the key", creators)
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Errorf("files left: %v", ents)
	}
}
