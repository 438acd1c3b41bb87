package testenv

import (
	"context"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ServiceAccountToken creates the ServiceAccount ns/name and returns a
// token of it from the TokenRequest API: envtest's API server signs
// ServiceAccount tokens, so a TokenReview of it succeeds.
func ServiceAccountToken(ctx context.Context, cs kubernetes.Interface, ns, name string) (string, error) {
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("TokenRequest for %s/%s: %w", ns, name, err)
	}
	return tr.Status.Token, nil
}
