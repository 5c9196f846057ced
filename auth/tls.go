package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"
)

// CertValidity is how long the generated CA and certificates are valid.
const CertValidity = 365 * 24 * time.Hour

// DefaultTLSHosts are the names the server certificate is always valid for.
var DefaultTLSHosts = []string{"localhost", "127.0.0.1", "::1"}

// keyPair is a PEM certificate and its PEM private key.
type keyPair struct {
	cert, key []byte
	x509      *x509.Certificate
	priv      *ecdsa.PrivateKey
}

// newCA makes a self-signed ECDSA P-256 CA valid from now-1h (clock skew)
// for CertValidity.
func newCA(now time.Time, name string) (*keyPair, error) {
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: name, Organization: []string{"Tenure"}},
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	return issue(now, tmpl, nil)
}

// newLeaf makes a certificate signed by ca: for a server (hosts are its DNS
// names and IP addresses) or a client (name is its common name).
func newLeaf(now time.Time, ca *keyPair, name string, server bool, hosts []string) (*keyPair, error) {
	tmpl := &x509.Certificate{
		Subject:  pkix.Name{CommonName: name, Organization: []string{"Tenure"}},
		KeyUsage: x509.KeyUsageDigitalSignature,
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		for _, h := range hosts {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	return issue(now, tmpl, ca)
}

// issue fills in the serial number, validity and key of tmpl and signs it
// with parent (self-signed if nil).
func issue(now time.Time, tmpl *x509.Certificate, parent *keyPair) (*keyPair, error) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("auth: generate key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("auth: serial number: %w", err)
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore = now.Add(-time.Hour)
	tmpl.NotAfter = now.Add(CertValidity)
	pub, err := x509.MarshalPKIXPublicKey(&priv.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("auth: public key: %w", err)
	}
	ski := sha256.Sum256(pub)
	tmpl.SubjectKeyId = ski[:20]
	signer, signerCert := priv, tmpl
	if parent != nil {
		signer, signerCert = parent.priv, parent.x509
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signerCert, &priv.PublicKey, signer)
	if err != nil {
		return nil, fmt.Errorf("auth: certificate %q: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("auth: certificate %q: %w", tmpl.Subject.CommonName, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, fmt.Errorf("auth: private key: %w", err)
	}
	return &keyPair{
		cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		x509: cert,
		priv: priv,
	}, nil
}
