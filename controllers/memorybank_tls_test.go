package controllers

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

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

// unmanagedBank creates a served bank the suite's manager leaves alone and
// returns it as read back.
func unmanagedBank(t *testing.T, ns, name string) *promptopsv1.MemoryBank {
	t.Helper()
	createYAML(t, ns, strings.Replace(servedBankYAML(name, 1), "metadata: {name: "+name+"}", "metadata: {name: "+name+", labels: {"+unmanagedLabel+": \"true\"}}", 1))
	return getMB(t, ns, name)
}

// managerClient is a client with the manager's own RBAC (the generated
// ClusterRole), not the test's.
func managerClient(t *testing.T) client.Client {
	t.Helper()
	c, err := client.New(managerCfg, client.Options{Scheme: NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A certificate the manager issued is renewed once a third of its
// validity is left: a new pair in the Secret, and the ConfigMap holds the
// new CA and the one before it, so that callers that have not seen the new
// one yet and pods still serving the old certificate both verify.
func TestServingTLSRenewal(t *testing.T) {
	ns := newNamespace(t)
	mb := unmanagedBank(t, ns, "renew")
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	c := managerClient(t)
	r := &MemoryBankReconciler{Client: c, APIReader: c, Clock: clock}
	res, err := r.reconcileServingCert(ctx, mb)
	if err != nil {
		t.Fatal(err)
	}
	if d := res.requeueAfter; d < 240*24*time.Hour || d > 245*24*time.Hour {
		t.Errorf("renewal asked in %s, want two thirds of a year", d)
	}
	first := &corev1.ConfigMap{}
	if err := getObj(t, ns, "renew-memory-ca", first); err != nil {
		t.Fatal(err)
	}
	clock.Set(clock.Now().Add(200 * 24 * time.Hour))
	if _, err := r.reconcileServingCert(ctx, mb); err != nil {
		t.Fatal(err)
	}
	same := &corev1.ConfigMap{}
	if err := getObj(t, ns, "renew-memory-ca", same); err != nil || same.ResourceVersion != first.ResourceVersion {
		t.Fatalf("renewed before a third was left: %v", err)
	}
	clock.Set(clock.Now().Add(50 * 24 * time.Hour))
	if _, err := r.reconcileServingCert(ctx, mb); err != nil {
		t.Fatal(err)
	}
	next, secret := &corev1.ConfigMap{}, &corev1.Secret{}
	if err := getObj(t, ns, "renew-memory-ca", next); err != nil {
		t.Fatal(err)
	}
	if err := getObj(t, ns, "renew-memory-tls", secret); err != nil {
		t.Fatal(err)
	}
	hosts := servingHosts(mb)
	if err := certs.Current([]byte(next.Data["ca.crt"]), secret.Data[corev1.TLSCertKey], hosts, clock.Now()); err != nil {
		t.Errorf("the renewed certificate: %v", err)
	}
	if !strings.HasSuffix(next.Data["ca.crt"], first.Data["ca.crt"]) || next.Data["ca.crt"] == first.Data["ca.crt"] {
		t.Error("the ConfigMap does not hold the new CA and the one before it")
	}
	if err := certs.Current([]byte(next.Data["ca.crt"]), []byte(first.Data[corev1.TLSCertKey]), hosts, clock.Now().Add(-50*24*time.Hour)); err != nil {
		t.Errorf("the old certificate does not verify against the bundle: %v", err)
	}
}

// With --memory-cert-issuer the manager writes the bank's cert-manager
// Certificate, with its own RBAC, and once only; its Secret is cert-manager's.
func TestServingTLSCertManager(t *testing.T) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal([]byte(`
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: certificates.cert-manager.io}
spec:
  group: cert-manager.io
  names: {kind: Certificate, listKind: CertificateList, plural: certificates, singular: certificate}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`), crd); err != nil {
		t.Fatal(err)
	}
	scheme := NewScheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	admin, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Create(ctx, crd); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
	ns := newNamespace(t)
	mb := unmanagedBank(t, ns, "cm")
	c := managerClient(t)
	r := &MemoryBankReconciler{Client: c, APIReader: c, Clock: testClock, CertIssuer: &CertIssuer{Kind: "ClusterIssuer", Name: "cluster-ca"}}
	eventually(t, func() error { _, err := r.reconcileServingCert(ctx, mb); return err })
	cert := &unstructured.Unstructured{}
	cert.SetAPIVersion("cert-manager.io/v1")
	cert.SetKind("Certificate")
	if err := getObj(t, ns, "cm-memory", cert); err != nil {
		t.Fatal(err)
	}
	if secret, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName"); secret != "cm-memory-tls" || !isControlledBy(cert.GetOwnerReferences(), mb.UID) {
		t.Errorf("Certificate %v, owners %v", cert.Object["spec"], cert.GetOwnerReferences())
	}
	if _, err := r.reconcileServingCert(ctx, mb); err != nil {
		t.Fatal(err)
	}
	again := cert.DeepCopy()
	if err := getObj(t, ns, "cm-memory", again); err != nil || again.GetResourceVersion() != cert.GetResourceVersion() {
		t.Errorf("the Certificate was written again with nothing changed: %v", err)
	}
	if err := getObj(t, ns, "cm-memory-ca", &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("a CA ConfigMap beside cert-manager: %v", err)
	}
	d, err := desiredServing(mb, "promptops:test")
	if err != nil {
		t.Fatal(err)
	}
	if vols := d.deployment.Spec.Template.Spec.Volumes; !slices.ContainsFunc(vols, func(v corev1ac.VolumeApplyConfiguration) bool {
		return v.Secret != nil && *v.Secret.SecretName == "cm-memory-tls"
	}) {
		t.Errorf("the Deployment does not mount cert-manager's Secret: %+v", vols)
	}
}
