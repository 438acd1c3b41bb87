package webhook

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// File names in the cert dir, as cert-manager's Secrets and the webhook
// server expect them.
const (
	CertFile = "tls.crt"
	KeyFile  = "tls.key"
	CAFile   = "ca.crt"
)

// SelfSigned keeps a CA and a serving certificate signed by it in Dir, for
// clusters without cert-manager and for the local demo. The webhook server
// reloads the files when they change.
type SelfSigned struct {
	Dir string
	// Hosts are the DNS names and IP addresses the certificate is valid
	// for: the webhook Service's DNS names, or 127.0.0.1 locally.
	Hosts []string
	// Validity of a new serving certificate; a certificate is renewed once
	// less than a third of it is left.
	Validity time.Duration
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

func (s *SelfSigned) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *SelfSigned) validity() time.Duration {
	if s.Validity > 0 {
		return s.Validity
	}
	return 365 * 24 * time.Hour
}

// Ensure writes a new CA and serving certificate unless Dir holds one that
// covers Hosts and has a third of its validity left. It returns the CA
// certificate (PEM), for a webhook configuration's caBundle, and whether it
// wrote new files.
func (s *SelfSigned) Ensure() (caPEM []byte, renewed bool, err error) {
	if ca, ok := s.current(); ok {
		return ca, false, nil
	}
	ca, cert, key, err := s.generate()
	if err != nil {
		return nil, false, err
	}
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return nil, false, err
	}
	// The key first, the certificate last: a reader that sees the new
	// certificate finds its key.
	for _, f := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{{KeyFile, key, 0o600}, {CAFile, ca, 0o644}, {CertFile, cert, 0o644}} {
		if err := writeAtomic(filepath.Join(s.Dir, f.name), f.data, f.mode); err != nil {
			return nil, false, err
		}
	}
	return ca, true, nil
}

// current returns the CA of the files in Dir when they are still good.
func (s *SelfSigned) current() ([]byte, bool) {
	ca, err := os.ReadFile(filepath.Join(s.Dir, CAFile))
	if err != nil {
		return nil, false
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(s.Dir, CertFile), filepath.Join(s.Dir, KeyFile))
	if err != nil || len(pair.Certificate) == 0 {
		return nil, false
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, false
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, false
	}
	now := s.now()
	left := leaf.NotAfter.Sub(now)
	if left < leaf.NotAfter.Sub(leaf.NotBefore)/3 {
		return nil, false
	}
	for _, h := range s.Hosts {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: h, Roots: pool, CurrentTime: now}); err != nil {
			return nil, false
		}
	}
	return ca, true
}

func (s *SelfSigned) generate() (caPEM, certPEM, keyPEM []byte, err error) {
	now := s.now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "promptops-webhook-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(s.validity() + 24*time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, nil, nil, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "promptops-webhook"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(s.validity()),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range s.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err)
	}
	return n
}

func writeAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr, os.Chmod(tmp.Name(), mode)); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// PatchCABundle sets caBundle on every webhook of the named
// ValidatingWebhookConfiguration. It needs get and patch on that one object,
// which a Role outside the generated one grants (config/webhook), so that the
// manager's own RBAC stays what the controllers need.
func PatchCABundle(ctx context.Context, c client.Client, name string, caPEM []byte) error {
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := c.Get(ctx, types.NamespacedName{Name: name}, vwc); err != nil {
		return fmt.Errorf("reading ValidatingWebhookConfiguration %s: %w", name, err)
	}
	orig := vwc.DeepCopy()
	for i := range vwc.Webhooks {
		if !bytes.Equal(vwc.Webhooks[i].ClientConfig.CABundle, caPEM) {
			vwc.Webhooks[i].ClientConfig.CABundle = slices.Clone(caPEM)
		}
	}
	if err := c.Patch(ctx, vwc, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("setting the caBundle of ValidatingWebhookConfiguration %s: %w", name, err)
	}
	return nil
}
