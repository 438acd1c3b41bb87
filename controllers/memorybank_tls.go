package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	promptopsv1 "github.com/promptops/promptops/api/v1"
	"github.com/promptops/promptops/internal/certs"
)

// A served bank answers over HTTPS with a certificate for its Service's DNS
// names, in the Secret <bank>-memory-tls (tls.crt, tls.key, ca.crt) that
// its pods mount and serve reloads. The certificate comes from cert-manager
// when the manager is given an issuer (a Certificate <bank>-memory), or
// else from the manager itself: a CA and a certificate of the bank's own,
// written into the Secret, the CA also into the ConfigMap <bank>-memory-ca
// for callers to verify with. The manager writes that Secret and never
// reads it (RBAC create and patch on secrets, no get): whether the pair is
// current is read from the ConfigMap, which holds the certificate too.
// +kubebuilder:rbac:groups="",resources=secrets,verbs=create;patch
// +kubebuilder:rbac:groups=cert-manager.io,resources=certificates,verbs=get;create;patch

const (
	// servingTLSDir is where a memory server's pods mount the Secret.
	servingTLSDir = "/var/run/promptops/tls"
	// ServingCAKey is the key of the CA in the Secret and the ConfigMap.
	ServingCAKey = "ca.crt"
	// servingCertValidity of a certificate the manager issues; it is
	// renewed once a third of it is left.
	servingCertValidity = 365 * 24 * time.Hour
)

// CertIssuer is the cert-manager issuer of served banks' certificates.
type CertIssuer struct {
	// Kind is ClusterIssuer, or Issuer: an Issuer of that name in each
	// bank's namespace.
	Kind string
	Name string
}

// ParseCertIssuer reads KIND/NAME (ClusterIssuer/ca or Issuer/ca).
func ParseCertIssuer(s string) (*CertIssuer, error) {
	kind, name, ok := strings.Cut(s, "/")
	if !ok || (kind != "ClusterIssuer" && kind != "Issuer") || name == "" || strings.Contains(name, "/") {
		return nil, fmt.Errorf("%q is not ClusterIssuer/NAME or Issuer/NAME", s)
	}
	return &CertIssuer{Kind: kind, Name: name}, nil
}

// ServingTLSSecret names the Secret of a served bank's certificate.
func ServingTLSSecret(mb *promptopsv1.MemoryBank) string { return mb.Name + "-memory-tls" }

// ServingCAConfigMap names the ConfigMap of the CA of a certificate the
// manager issued for a served bank.
func ServingCAConfigMap(mb *promptopsv1.MemoryBank) string { return mb.Name + "-memory-ca" }

// servingHosts are the DNS names of the bank's Service.
func servingHosts(mb *promptopsv1.MemoryBank) []string {
	name, ns := servingName(mb), mb.Namespace
	return []string{name + "." + ns + ".svc", name + "." + ns + ".svc.cluster.local", name + "." + ns, name}
}

// desiredCertificate is the cert-manager Certificate of a served bank, as
// unstructured: cert-manager's types are no dependency of ours.
func desiredCertificate(mb *promptopsv1.MemoryBank, issuer *CertIssuer) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cert-manager.io/v1",
		"kind":       "Certificate",
		"metadata": map[string]any{
			"name":      servingName(mb),
			"namespace": mb.Namespace,
			"labels":    toAny(servingLabels(mb)),
		},
		"spec": map[string]any{
			"secretName": ServingTLSSecret(mb),
			"dnsNames":   toAnySlice(servingHosts(mb)),
			"usages":     []any{"server auth", "digital signature", "key encipherment"},
			"privateKey": map[string]any{"algorithm": "ECDSA", "size": int64(256), "rotationPolicy": "Always"},
			"issuerRef":  map[string]any{"group": "cert-manager.io", "kind": issuer.Kind, "name": issuer.Name},
		},
	}}
	u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: promptopsv1.GroupVersion.String(), Kind: "MemoryBank", Name: mb.Name, UID: mb.UID,
		Controller: ptrTo(true), BlockOwnerDeletion: ptrTo(true)}})
	return u
}

func toAny(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func toAnySlice(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// reconcileServingCert makes sure the bank's Secret holds a current
// certificate, before the Deployment that mounts it is written; it returns
// when to look again (the renewal of a certificate the manager issued).
func (r *MemoryBankReconciler) reconcileServingCert(ctx context.Context, mb *promptopsv1.MemoryBank) (phaseResult, error) {
	if r.CertIssuer != nil {
		return phaseResult{}, r.applyCertificate(ctx, mb)
	}
	now := r.Clock.Now()
	hosts := servingHosts(mb)
	key := types.NamespacedName{Namespace: mb.Namespace, Name: ServingCAConfigMap(mb)}
	cm := &corev1.ConfigMap{}
	err := r.APIReader.Get(ctx, key, cm)
	if client.IgnoreNotFound(err) != nil {
		return phaseResult{}, err
	}
	ours := err == nil && isControlledBy(cm.OwnerReferences, mb.UID)
	if ours && certs.Current([]byte(cm.Data[ServingCAKey]), []byte(cm.Data[corev1.TLSCertKey]), hosts, now) == nil {
		return requeueAfter(renewalIn([]byte(cm.Data[corev1.TLSCertKey]), now)), nil
	}
	pair, err := certs.Issue("promptops-memory-ca "+mb.Namespace+"/"+mb.Name, servingName(mb), hosts, servingCertValidity, now)
	if err != nil {
		return phaseResult{}, err
	}
	labels := servingLabels(mb)
	ref := bankOwner(mb).ref()
	// Without force: a Secret someone else wrote is not overwritten.
	secret := corev1ac.Secret(ServingTLSSecret(mb), mb.Namespace).WithLabels(labels).WithOwnerReferences(ref).
		WithType(corev1.SecretTypeTLS).
		WithData(map[string][]byte{corev1.TLSCertKey: pair.Cert, corev1.TLSPrivateKeyKey: pair.Key, ServingCAKey: pair.CA})
	if err := r.Apply(ctx, secret, client.FieldOwner(FieldOwner)); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsInvalid(err) {
			// No watch tells of the Secret's deletion: look again.
			return phaseResult{}, &stallingError{reason: promptopsv1.ReasonCertificateConflict, cause: err, recheckAfter: time.Minute,
				message: fmt.Sprintf("Secret %s exists and is not the manager's, which writes the memory server's certificate there: rename or delete it, or give the manager a cert-manager issuer (--memory-cert-issuer).", ServingTLSSecret(mb))}
		}
		return phaseResult{}, fmt.Errorf("writing Secret %s: %w", ServingTLSSecret(mb), err)
	}
	// Callers trust the new CA and, while pods still serve the old
	// certificate (a mounted Secret changes within a minute or so), the one
	// it replaces.
	bundle := pair.CA
	if ours {
		if block, _ := pem.Decode([]byte(cm.Data[ServingCAKey])); block != nil {
			bundle = append(bundle, pem.EncodeToMemory(block)...)
		}
	}
	caCM := corev1ac.ConfigMap(ServingCAConfigMap(mb), mb.Namespace).WithLabels(labels).WithOwnerReferences(ref).
		WithData(map[string]string{ServingCAKey: string(bundle), corev1.TLSCertKey: string(pair.Cert)})
	if err := r.Apply(ctx, caCM, client.FieldOwner(FieldOwner)); err != nil {
		return phaseResult{}, fmt.Errorf("writing ConfigMap %s: %w", ServingCAConfigMap(mb), err)
	}
	ctrlLog(ctx).Info("Issued the memory server's certificate", "secret", ServingTLSSecret(mb), "configMap", ServingCAConfigMap(mb))
	return requeueAfter(renewalIn(pair.Cert, now)), nil
}

// renewalIn is how long until a certificate has a third of its validity
// left.
func renewalIn(certPEM []byte, now time.Time) time.Duration {
	leaf, err := certs.Leaf(certPEM)
	if err != nil {
		return 0
	}
	return leaf.NotAfter.Add(-leaf.NotAfter.Sub(leaf.NotBefore) / 3).Sub(now)
}

// applyCertificate writes the bank's Certificate unless it holds what was
// last applied.
func (r *MemoryBankReconciler) applyCertificate(ctx context.Context, mb *promptopsv1.MemoryBank) error {
	want := desiredCertificate(mb, r.CertIssuer)
	data, err := json.Marshal(want.Object)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(data)
	hash := hex.EncodeToString(sum[:16])
	have := &unstructured.Unstructured{}
	have.SetAPIVersion("cert-manager.io/v1")
	have.SetKind("Certificate")
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: mb.Namespace, Name: servingName(mb)}, have); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("reading Certificate %s (is cert-manager installed?): %w", servingName(mb), err)
	} else if err == nil && have.GetAnnotations()[annotationAppliedHash] == hash && isControlledBy(have.GetOwnerReferences(), mb.UID) {
		return nil
	}
	want.SetAnnotations(map[string]string{annotationAppliedHash: hash})
	if err := r.Apply(ctx, client.ApplyConfigurationFromUnstructured(want), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying Certificate %s: %w", servingName(mb), err)
	}
	ctrlLog(ctx).Info("Applied memory server object", "kind", "Certificate", "name", servingName(mb))
	return nil
}
