package webhook

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestSelfSignedEnsure(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := &SelfSigned{Dir: filepath.Join(t.TempDir(), "certs"), Hosts: []string{"promptops-webhook.promptops-system.svc", "127.0.0.1"}, Validity: 90 * 24 * time.Hour, Now: func() time.Time { return now }}
	ca, renewed, err := s.Ensure()
	if err != nil || !renewed {
		t.Fatalf("first Ensure: renewed %v, err %v", renewed, err)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(s.Dir, CertFile), filepath.Join(s.Dir, KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	for _, h := range s.Hosts {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: h, Roots: pool, CurrentTime: now}); err != nil {
			t.Errorf("%s: %v", h, err)
		}
	}
	if info, _ := os.Stat(filepath.Join(s.Dir, KeyFile)); info.Mode().Perm() != 0o600 {
		t.Errorf("key mode %v", info.Mode().Perm())
	}

	again, renewed, err := s.Ensure()
	if err != nil || renewed || string(again) != string(ca) {
		t.Fatalf("second Ensure rewrote good files: renewed %v, err %v", renewed, err)
	}
	now = now.Add(61 * 24 * time.Hour) // under a third of 90 days left
	if _, renewed, err := s.Ensure(); err != nil || !renewed {
		t.Fatalf("near expiry: renewed %v, err %v", renewed, err)
	}
	s.Hosts = append(s.Hosts, "other.example")
	if _, renewed, err := s.Ensure(); err != nil || !renewed {
		t.Fatalf("new host: renewed %v, err %v", renewed, err)
	}
}
