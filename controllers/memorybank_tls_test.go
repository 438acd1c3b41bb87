package controllers

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/internal/certs"
)

// TestServingTLS: without a cert-manager issuer the manager issues a served
// bank's certificate itself: a Secret of type kubernetes.io/tls that the
// pods mount, with a certificate for the Service's DNS names that verifies
// against the CA of the ConfigMap <bank>-memory-ca; a settled bank's
// Secret is not written again; a deleted ConfigMap has a new pair issued.
// The manager does this with its generated RBAC, which cannot read Secrets.
func TestServingTLS(t *testing.T) {
	ns := newNamespace(t)
	createYAML(t, ns, servedBankYAML("tls", 1))
	mb := waitMB(t, ns, "tls", func(mb *promptopsv1.MemoryBank) error {
		if mb.Status.Serving == nil {
			return fmt.Errorf("not served yet")
		}
		return nil
	})
	secret := waitObj(t, ns, "tls-memory-tls", &corev1.Secret{})
	controlledBy(t, secret, mb)
	cm := waitObj(t, ns, "tls-memory-ca", &corev1.ConfigMap{})
	controlledBy(t, cm, mb)
	if secret.Type != corev1.SecretTypeTLS {
		t.Errorf("Secret type %s", secret.Type)
	}
	if _, err := tls.X509KeyPair(secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey]); err != nil {
		t.Fatalf("the Secret's pair: %v", err)
	}
	hosts := []string{"tls-memory." + ns + ".svc", "tls-memory." + ns + ".svc.cluster.local"}
	if err := certs.Current([]byte(cm.Data["ca.crt"]), secret.Data[corev1.TLSCertKey], hosts, testClock.Now()); err != nil {
		t.Errorf("the certificate does not verify against the ConfigMap's CA: %v", err)
	}
	if string(secret.Data["ca.crt"]) != cm.Data["ca.crt"] || string(secret.Data[corev1.TLSCertKey]) != cm.Data[corev1.TLSCertKey] {
		t.Error("the Secret and the ConfigMap disagree")
	}
	leaf, _ := certs.Leaf(secret.Data[corev1.TLSCertKey])
	if leaf == nil || !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageServerAuth) {
		t.Errorf("not a serving certificate: %+v", leaf)
	}

	d := waitObj(t, ns, "tls-memory", &appsv1.Deployment{})
	pod := d.Spec.Template.Spec
	mounted := false
	for _, v := range pod.Volumes {
		if v.Secret != nil && v.Secret.SecretName == "tls-memory-tls" {
			for _, m := range pod.Containers[0].VolumeMounts {
				mounted = mounted || (m.Name == v.Name && m.MountPath == "/var/run/promptops/tls" && m.ReadOnly)
			}
		}
	}
	if !mounted {
		t.Errorf("the Secret is not mounted read-only at /var/run/promptops/tls: %+v %+v", pod.Volumes, pod.Containers[0].VolumeMounts)
	}

	// Settled: nothing issued again.
	before := writes.matching(ns+"/secrets") + writes.matching(ns+"/configmaps/tls-memory-ca")
	poke(t, ns, "tls")
	poke(t, ns, "tls")
	if n := writes.matching(ns+"/secrets") + writes.matching(ns+"/configmaps/tls-memory-ca"); n != before {
		t.Errorf("%d writes of the certificate with nothing changed", n-before)
	}

	// The ConfigMap deleted: a new CA and certificate.
	if err := k8sClient.Delete(ctx, cm); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() error {
		next := &corev1.ConfigMap{}
		if err := getObj(t, ns, "tls-memory-ca", next); err != nil {
			return err
		}
		s := &corev1.Secret{}
		if err := getObj(t, ns, "tls-memory-tls", s); err != nil {
			return err
		}
		if next.Data["ca.crt"] == cm.Data["ca.crt"] || string(s.Data["ca.crt"]) != next.Data["ca.crt"] {
			return fmt.Errorf("not issued again")
		}
		return certs.Current([]byte(next.Data["ca.crt"]), s.Data[corev1.TLSCertKey], hosts, testClock.Now())
	})
}

// A Secret of that name someone else wrote is not overwritten.
func TestServingTLSForeignSecret(t *testing.T) {
	ns := newNamespace(t)
	createYAML(t, ns, `
apiVersion: v1
kind: Secret
metadata: {name: mine-memory-tls}
type: Opaque
stringData: {password: hunter2}
`)
	createYAML(t, ns, servedBankYAML("mine", 1))
	waitMB(t, ns, "mine", func(mb *promptopsv1.MemoryBank) error {
		if msg := conditionMessage(mb.Status.Conditions, promptopsv1.ConditionReady); !strings.Contains(msg, "Secret mine-memory-tls exists and is not the manager's") {
			return fmt.Errorf("Ready message %q", msg)
		}
		return nil
	})
	s := &corev1.Secret{}
	if err := getObj(t, ns, "mine-memory-tls", s); err != nil || string(s.Data["password"]) != "hunter2" || len(s.Data) != 1 {
		t.Errorf("the foreign Secret was changed: %v %v", s.Data, err)
	}
}

// With a cert-manager issuer, the bank's Certificate names the Service's
// DNS names, the Secret the pods mount and the issuer; the bank owns it.
func TestDesiredCertificate(t *testing.T) {
	mb := &promptopsv1.MemoryBank{}
	mb.Name, mb.Namespace, mb.UID = "shop", "team-a", "uid-1"
	for _, c := range []struct {
		flag, kind, name string
	}{{"ClusterIssuer/cluster-ca", "ClusterIssuer", "cluster-ca"}, {"Issuer/local", "Issuer", "local"}} {
		issuer, err := ParseCertIssuer(c.flag)
		if err != nil {
			t.Fatal(err)
		}
		u := desiredCertificate(mb, issuer)
		if u.GetName() != "shop-memory" || u.GetNamespace() != "team-a" || u.GetKind() != "Certificate" || u.GetAPIVersion() != "cert-manager.io/v1" {
			t.Errorf("%s: %s %s/%s", c.flag, u.GetKind(), u.GetNamespace(), u.GetName())
		}
		if secret, _, _ := unstructured.NestedString(u.Object, "spec", "secretName"); secret != "shop-memory-tls" {
			t.Errorf("secretName %q", secret)
		}
		names, _, _ := unstructured.NestedStringSlice(u.Object, "spec", "dnsNames")
		if !slices.Contains(names, "shop-memory.team-a.svc") || !slices.Contains(names, "shop-memory.team-a.svc.cluster.local") {
			t.Errorf("dnsNames %q", names)
		}
		ref, _, _ := unstructured.NestedStringMap(u.Object, "spec", "issuerRef")
		if ref["kind"] != c.kind || ref["name"] != c.name || ref["group"] != "cert-manager.io" {
			t.Errorf("issuerRef %v", ref)
		}
		if !isControlledBy(u.GetOwnerReferences(), mb.UID) {
			t.Errorf("not owned by the bank: %+v", u.GetOwnerReferences())
		}
	}
	for _, bad := range []string{"", "cluster-ca", "Issuer/", "Secret/x", "ClusterIssuer/a/b"} {
		if _, err := ParseCertIssuer(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
