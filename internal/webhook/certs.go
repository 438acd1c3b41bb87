package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/promptops/promptops/internal/certs"
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
	cert, err := os.ReadFile(filepath.Join(s.Dir, CertFile))
	if err != nil || certs.Current(ca, cert, s.Hosts, s.now()) != nil {
		return nil, false
	}
	return ca, true
}

func (s *SelfSigned) generate() (caPEM, certPEM, keyPEM []byte, err error) {
	p, err := certs.Issue("promptops-webhook-ca", "promptops-webhook", s.Hosts, s.validity(), s.now())
	return p.CA, p.Cert, p.Key, err
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
