package controlplane

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// servingCert is a self-signed certificate (with its CA in the chain) for a loopback
// server. CertPEM doubles as the CA bundle a client trusts.
type servingCert struct {
	CertPEM  []byte
	CertFile string
	KeyFile  string
}

// writeServingCert creates a certificate for 127.0.0.1 and localhost in dir, as
// dir/tls.crt and dir/tls.key (the names controller-runtime's webhook server reads).
func writeServingCert(dir string, dnsNames ...string) (servingCert, error) {
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("127.0.0.1",
		[]net.IP{net.ParseIP("127.0.0.1")}, append([]string{"localhost"}, dnsNames...))
	if err != nil {
		return servingCert{}, fmt.Errorf("generate serving certificate: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return servingCert{}, err
	}
	c := servingCert{
		CertPEM:  certPEM,
		CertFile: filepath.Join(dir, "tls.crt"),
		KeyFile:  filepath.Join(dir, "tls.key"),
	}
	if err := os.WriteFile(c.CertFile, certPEM, 0o600); err != nil {
		return servingCert{}, err
	}
	if err := os.WriteFile(c.KeyFile, keyPEM, 0o600); err != nil {
		return servingCert{}, err
	}
	return c, nil
}

// writeServiceAccountKey writes the key that signs service account tokens. The API
// server reads the public half from the same private key file.
func writeServiceAccountKey(path string) error {
	keyPEM, err := keyutil.MakeEllipticPrivateKeyPEM()
	if err != nil {
		return fmt.Errorf("generate service account key: %w", err)
	}
	return os.WriteFile(path, keyPEM, 0o600)
}

// randomToken returns a bearer token for the admin user.
func randomToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
