package certs

import (
	"crypto/tls"
	"strings"
	"testing"
	"time"
)

func TestIssueAndCurrent(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	hosts := []string{"b-memory.ns.svc", "b-memory.ns.svc.cluster.local", "127.0.0.1"}
	p, err := Issue("ca", "b-memory", hosts, 90*24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.X509KeyPair(p.Cert, p.Key); err != nil {
		t.Fatalf("the pair: %v", err)
	}
	other, err := Issue("other", "b-memory", hosts, 90*24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what   string
		ca     []byte
		hosts  []string
		at     time.Time
		errHas string
	}{
		{"fresh", p.CA, hosts, now, ""},
		{"two thirds left", p.CA, hosts, now.Add(59 * 24 * time.Hour), ""},
		{"less than a third left", p.CA, hosts, now.Add(61 * 24 * time.Hour), "expires"},
		{"another name", p.CA, []string{"x-memory.ns.svc"}, now, "x-memory"},
		{"another CA", other.CA, hosts, now, "unknown authority"},
		{"both CAs, as during a renewal", append(other.CA, p.CA...), hosts, now, ""},
		{"no CA", []byte("nothing"), hosts, now, "no PEM CA"},
	} {
		err := Current(c.ca, p.Cert, c.hosts, c.at)
		if (c.errHas == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.errHas)) {
			t.Errorf("%s: %v, want %q", c.what, err, c.errHas)
		}
	}
	if err := Current(p.CA, []byte("nothing"), hosts, now); err == nil {
		t.Error("no certificate was current")
	}
}
