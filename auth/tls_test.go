package auth_test

import (
	"bufio"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/maknow/tenure/auth"
	"github.com/maknow/tenure/internal/testutil"
)

// With --tls the server accepts only TLS connections from clients that trust
// its CA and, with verify, present a certificate from that CA.
func TestTLS(t *testing.T) {
	t.Parallel()
	b := generate(t, auth.Options{TLS: true, TLSVerify: true})
	other := generate(t, auth.Options{TLS: true, TLSVerify: true}) // another CA
	srv := testutil.StartServer(t, testutil.ConfigFile(b.ServerConfigPath()))
	u := srv.ClientURL()
	w1, _ := b.Credential("w1")
	w1Other, _ := other.Credential("w1")

	t.Run("plaintext refused", func(t *testing.T) {
		host, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := net.DialTimeout("tcp", host.Host, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		r := bufio.NewReader(conn)
		info, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(info, `"tls_required":true`) {
			t.Fatalf("INFO without tls_required: %s", info)
		}
		if _, err := conn.Write([]byte(`CONNECT {"verbose":false,"user":"w1","pass":"` + w1.Password + "\"}\r\nPING\r\nSUB tenure.out.> 1\r\nPING\r\n")); err != nil {
			t.Fatal(err)
		}
		rest, _ := r.ReadString(0) // until the server closes the connection
		if strings.Contains(rest, "PONG") {
			t.Fatalf("a plaintext client was answered: %q", rest)
		}
	})

	t.Run("client without the CA refused", func(t *testing.T) {
		c := w1
		c.TLSCAFile = "" // the system roots do not know the generated CA
		if nc, err := c.Connect(u, nats.Timeout(20*time.Second)); err == nil || !tlsRefusal(err) {
			closeIf(nc)
			t.Fatalf("connected without trusting the CA: %v", err)
		}
	})

	t.Run("client trusting an unknown CA refused", func(t *testing.T) {
		c := w1
		c.TLSCAFile = w1Other.TLSCAFile
		if nc, err := c.Connect(u, nats.Timeout(20*time.Second)); err == nil || !tlsRefusal(err) {
			closeIf(nc)
			t.Fatalf("connected trusting another CA: %v", err)
		}
	})

	t.Run("client without a certificate refused", func(t *testing.T) {
		c := w1
		c.TLSCertFile, c.TLSKeyFile = "", ""
		if nc, err := c.Connect(u, nats.Timeout(20*time.Second)); err == nil || !tlsRefusal(err) {
			closeIf(nc)
			t.Fatalf("connected without a client certificate: %v", err)
		}
	})

	t.Run("client certificate from another CA refused", func(t *testing.T) {
		c := w1
		c.TLSCertFile, c.TLSKeyFile = w1Other.TLSCertFile, w1Other.TLSKeyFile
		if nc, err := c.Connect(u, nats.Timeout(20*time.Second)); err == nil || !tlsRefusal(err) {
			closeIf(nc)
			t.Fatalf("connected with a certificate of another CA: %v", err)
		}
	})

	t.Run("proper client works", func(t *testing.T) {
		nc, err := w1.Connect(u, nats.Timeout(20*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		if !nc.TLSRequired() {
			t.Fatal("connection not TLS")
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		// And the password still matters: TLS adds to authentication.
		c := w1
		c.Password = "wrong"
		if nc, err := c.Connect(u, nats.Timeout(20*time.Second)); !errors.Is(err, nats.ErrAuthorization) {
			closeIf(nc)
			t.Fatalf("connected with a wrong password: %v", err)
		}
	})
}

// Without verify, client certificates are optional.
func TestTLSWithoutVerify(t *testing.T) {
	t.Parallel()
	b := generate(t, auth.Options{TLS: true})
	srv := testutil.StartServer(t, testutil.ConfigFile(b.ServerConfigPath()))
	w1, _ := b.Credential("w1")
	w1.TLSCertFile, w1.TLSKeyFile = "", ""
	nc, err := w1.Connect(srv.ClientURL(), nats.Timeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
}

// The certificates: ECDSA P-256, a year, the server valid for the loopback
// names, clients for client authentication only, all from the CA.
func TestCertificates(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	b := generate(t, auth.Options{TLS: true, TLSVerify: true, TLSHosts: []string{"tenure.example.com", "10.1.2.3"}, Now: now})
	load := func(name string) *x509.Certificate {
		t.Helper()
		data, err := os.ReadFile(b.Dir + "/" + name)
		if err != nil {
			t.Fatal(err)
		}
		blk, _ := pem.Decode(data)
		if blk == nil {
			t.Fatalf("%s: no PEM", name)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ca := load(auth.CAFile)
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	if !ca.IsCA || ca.PublicKeyAlgorithm != x509.ECDSA {
		t.Fatalf("CA: IsCA %v, %v", ca.IsCA, ca.PublicKeyAlgorithm)
	}
	srv := load(auth.ServerCertFile)
	for _, host := range []string{"localhost", "127.0.0.1", "::1", "tenure.example.com", "10.1.2.3"} {
		if _, err := srv.Verify(x509.VerifyOptions{DNSName: host, Roots: roots, CurrentTime: now}); err != nil {
			t.Errorf("server certificate for %s: %v", host, err)
		}
	}
	if got := srv.NotAfter.Sub(now); got != auth.CertValidity {
		t.Errorf("validity %v", got)
	}
	if _, err := srv.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now.Add(auth.CertValidity + time.Hour)}); err == nil {
		t.Error("server certificate valid after a year")
	}
	cl := load("w1" + auth.CertSuffix)
	if _, err := cl.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	if _, err := cl.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now}); err == nil {
		t.Error("client certificate usable as a server certificate")
	}
	if cl.Subject.CommonName != "w1" {
		t.Errorf("client certificate CN %q", cl.Subject.CommonName)
	}
}

// tlsRefusal reports whether err is a TLS failure: the server's certificate
// not verified, or the server's alert about the client's certificate (not a
// timeout).
func tlsRefusal(err error) bool {
	s := err.Error()
	return strings.Contains(s, "x509") || strings.Contains(s, "tls:") || strings.Contains(s, "tls error") || strings.Contains(s, "certificate")
}

func closeIf(nc *nats.Conn) {
	if nc != nil {
		nc.Close()
	}
}
