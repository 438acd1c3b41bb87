// Package charttest checks what platform teams install: the Helm chart in
// charts/promptops (helm lint; helm template for the values they set; its
// RBAC, CRDs and webhooks equal to the generated ones) and config/default
// with its kustomize components, each applied to a real API server
// server-side with dry run.
package charttest

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"k8s.io/client-go/rest"
	"os"
	"os/exec"
	"path/filepath"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"slices"
	"strings"
	"sync"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/promptops/promptops/controllers"
	"github.com/promptops/promptops/internal/testenv"
)

const namespace = "promptops-system"

func chartDir() string { return filepath.Join(testenv.Root(), "charts", "promptops") }

// helm runs bin/helm (or $HELM); it fails, never skips, without it.
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	bin := os.Getenv("HELM")
	if bin == "" {
		bin = filepath.Join(testenv.Root(), "bin", "helm")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("helm not found at %s: run 'make helm' (builds it from the Go module proxy) or set HELM", bin)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// No repositories, plugins or cache of the developer's own.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// valueSets are what the tests render: the defaults, and every option on.
var valueSets = map[string][]string{
	"defaults":    nil,
	"webhook":     {"webhook.enabled=true", "serve.enabled=true", "logLevel=debug", "extraArgs={--max-concurrent-reconciles=8}"},
	"everything":  {"webhook.enabled=true", "certManager.enabled=true", "metrics.serviceMonitor.enabled=true", "serve.enabled=true", "replicaCount=2", "nodeSelector.kubernetes\\.io/os=linux", "tolerations[0].operator=Exists"},
	"no-extras":   {"rbac.aggregateToDefaultRoles=false", "leaderElection.enabled=false", "metrics.secure=false"},
	"job-image":   {"image.repository=registry.example/promptops", "image.tag=v9", "jobImage.tag=v9-jobs"},
	"issuer":      {"webhook.enabled=true", "certManager.enabled=true", "certManager.issuerRef.kind=ClusterIssuer", "certManager.issuerRef.name=corp-ca"},
	"serviceacct": {"serviceAccount.create=false", "serviceAccount.name=existing"},
	"namespaced":  {"serve.enabled=true", "serve.namespaces={team-a,team-b}", "networkPolicy.enabled=true", "webhook.enabled=true"},
	"tokenizers":  {"serve.enabled=true", "webhook.enabled=true", "tokenizers.volume.persistentVolumeClaim.claimName=model-files"},
	"telemetry":   {"serve.enabled=true", "opentelemetry.env.OTEL_EXPORTER_OTLP_ENDPOINT=http://otel-collector.observability:4318"},
}

// servedNamespaces are those of the "namespaced" values; the apply test
// creates them.
var servedNamespaces = []string{"team-a", "team-b"}

func setArgs(set []string) []string {
	var args []string
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return args
}

func TestHelmLint(t *testing.T) {
	for name, set := range valueSets {
		t.Run(name, func(t *testing.T) {
			if out, err := helm(t, append([]string{"lint", "--strict", chartDir()}, setArgs(set)...)...); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
}

// render returns the objects helm template renders with set.
func render(t *testing.T, set ...string) []*unstructured.Unstructured {
	t.Helper()
	out, err := helm(t, append([]string{"template", "promptops", chartDir(), "--namespace", namespace, "--include-crds"}, setArgs(set)...)...)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, []byte(out))
}

func decode(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	objs, err := testenv.DecodeObjects(data)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string, into any) bool {
	t.Helper()
	for _, u := range objs {
		if u.GetKind() == kind && u.GetName() == name {
			if into != nil {
				if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, into, true); err != nil {
					t.Fatalf("%s %s: %v", kind, name, err)
				}
			}
			return true
		}
	}
	return false
}

func readFile(t *testing.T, path string, into any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.Root(), path))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, into); err != nil {
		t.Fatal(err)
	}
}

func managerContainer(t *testing.T, objs []*unstructured.Unstructured) (*appsv1.Deployment, *corev1.Container) {
	t.Helper()
	d := &appsv1.Deployment{}
	if !find(t, objs, "Deployment", "promptops-manager", d) {
		t.Fatal("no Deployment promptops-manager")
	}
	return d, &d.Spec.Template.Spec.Containers[0]
}

func env(c *corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func TestChartIsTheGeneratedManifests(t *testing.T) {
	objs := render(t, "webhook.enabled=true")

	// RBAC from the same markers as config/rbac/role.yaml.
	want := &rbacv1.ClusterRole{}
	readFile(t, "config/rbac/role.yaml", want)
	got := &rbacv1.ClusterRole{}
	if !find(t, objs, "ClusterRole", "promptops-manager", got) {
		t.Fatal("no ClusterRole promptops-manager")
	}
	if !equality.Semantic.DeepEqual(got.Rules, want.Rules) {
		t.Errorf("the chart's manager rules differ from config/rbac/role.yaml (run make manifests):\n%v\n%v", got.Rules, want.Rules)
	}

	// The same CRDs as config/crd/bases.
	crds, _ := filepath.Glob(filepath.Join(testenv.Root(), "config", "crd", "bases", "*.yaml"))
	if len(crds) == 0 {
		t.Fatal("no CRDs in config/crd/bases")
	}
	for _, f := range crds {
		a, _ := os.ReadFile(f)
		b, err := os.ReadFile(filepath.Join(chartDir(), "files", "crds", filepath.Base(f)))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("charts/promptops/files/crds/%s differs from config/crd/bases (run make manifests): %v", filepath.Base(f), err)
		}
	}

	// The webhooks of config/webhook, pointed at the chart's Service.
	gen := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	readFile(t, "config/webhook/manifests.yaml", gen)
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if !find(t, objs, "ValidatingWebhookConfiguration", "promptops-validating-webhook", vwc) {
		t.Fatal("no ValidatingWebhookConfiguration")
	}
	if len(vwc.Webhooks) != len(gen.Webhooks) {
		t.Fatalf("%d webhooks, generated %d", len(vwc.Webhooks), len(gen.Webhooks))
	}
	for i, w := range vwc.Webhooks {
		g := gen.Webhooks[i]
		if w.Name != g.Name || !equality.Semantic.DeepEqual(w.Rules, g.Rules) || *w.SideEffects != *g.SideEffects ||
			*w.ClientConfig.Service.Path != *g.ClientConfig.Service.Path || *w.FailurePolicy != admissionregistrationv1.Ignore {
			t.Errorf("webhook %d: %+v, generated %+v", i, w, g)
		}
		if s := w.ClientConfig.Service; s.Name != "promptops-webhook" || s.Namespace != namespace {
			t.Errorf("webhook %d goes to %s/%s", i, s.Namespace, s.Name)
		}
	}
	if !find(t, objs, "Service", "promptops-webhook", nil) || !find(t, objs, "ClusterRole", "promptops-webhook-cabundle", nil) {
		t.Error("webhook Service or caBundle role missing")
	}
}

func TestChartValues(t *testing.T) {
	t.Run("defaults", func(t *testing.T) {
		objs := render(t)
		d, c := managerContainer(t, objs)
		for _, a := range []string{"manager", "--leader-elect", "--metrics-secure", "--metrics-bind-address=:8443", "--zap-log-level=info"} {
			if !slices.Contains(c.Args, a) {
				t.Errorf("args %q lack %s", c.Args, a)
			}
		}
		if slices.Contains(c.Args, "--enable-webhook") || find(t, objs, "ValidatingWebhookConfiguration", "promptops-validating-webhook", nil) {
			t.Error("the webhook is on by default")
		}
		if c.Image != "promptops/promptops:0.1.0" || env(c, "PROMPTOPS_JOB_IMAGE") != c.Image {
			t.Errorf("image %s, job image %s: want one image", c.Image, env(c, "PROMPTOPS_JOB_IMAGE"))
		}
		// The Restricted Pod Security Standard.
		ps, cs := d.Spec.Template.Spec.SecurityContext, c.SecurityContext
		if ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.SeccompProfile == nil || ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault ||
			cs == nil || cs.AllowPrivilegeEscalation == nil || *cs.AllowPrivilegeEscalation || cs.Capabilities == nil || !slices.Equal(cs.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("not Restricted: pod %+v, container %+v", ps, cs)
		}
		svc := &corev1.Service{}
		if !find(t, objs, "Service", "promptops-metrics", svc) || svc.Spec.Ports[0].Port != 8443 || svc.Spec.Ports[0].Name != "https" {
			t.Errorf("metrics Service: %+v", svc.Spec.Ports)
		}
		for _, name := range []string{"promptops-editor", "promptops-viewer", "promptops-metrics-reader"} {
			if !find(t, objs, "ClusterRole", name, nil) {
				t.Errorf("no ClusterRole %s", name)
			}
		}
		editor, viewer := &rbacv1.ClusterRole{}, &rbacv1.ClusterRole{}
		find(t, objs, "ClusterRole", "promptops-editor", editor)
		find(t, objs, "ClusterRole", "promptops-viewer", viewer)
		if editor.Labels["rbac.authorization.k8s.io/aggregate-to-edit"] != "true" || viewer.Labels["rbac.authorization.k8s.io/aggregate-to-view"] != "true" {
			t.Errorf("aggregation labels: %v, %v", editor.Labels, viewer.Labels)
		}
		if find(t, objs, "ServiceMonitor", "promptops-metrics", nil) || find(t, objs, "Deployment", "promptops-serve", nil) {
			t.Error("ServiceMonitor or serve on by default")
		}
	})
	t.Run("everything", func(t *testing.T) {
		objs := render(t, valueSets["everything"]...)
		d, c := managerContainer(t, objs)
		if *d.Spec.Replicas != 2 || !slices.Contains(c.Args, "--leader-elect") || !slices.Contains(c.Args, "--enable-webhook") || slices.Contains(c.Args, "--webhook-self-signed") {
			t.Errorf("replicas %d, args %q", *d.Spec.Replicas, c.Args)
		}
		if d.Spec.Template.Spec.NodeSelector["kubernetes.io/os"] != "linux" || len(d.Spec.Template.Spec.Tolerations) != 1 {
			t.Errorf("scheduling: %+v", d.Spec.Template.Spec)
		}
		if v := d.Spec.Template.Spec.Volumes; len(v) != 1 || v[0].Secret == nil || v[0].Secret.SecretName != "promptops-webhook-cert" {
			t.Errorf("webhook certificate volume: %+v", v)
		}
		vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		find(t, objs, "ValidatingWebhookConfiguration", "promptops-validating-webhook", vwc)
		if vwc.Annotations["cert-manager.io/inject-ca-from"] != namespace+"/promptops-webhook" {
			t.Errorf("annotations %v", vwc.Annotations)
		}
		for _, k := range [][2]string{{"ServiceMonitor", "promptops-metrics"}, {"Certificate", "promptops-webhook"}, {"Issuer", "promptops-selfsigned"}} {
			if !find(t, objs, k[0], k[1], nil) {
				t.Errorf("no %s %s", k[0], k[1])
			}
		}
		serve := &appsv1.Deployment{}
		if !find(t, objs, "Deployment", "promptops-serve", serve) || !slices.Equal(serve.Spec.Template.Spec.Containers[0].Args, []string{"serve", "--watch", "--auth=kubernetes", "--listen=:8089",
			"--tls-cert-file=/var/run/promptops/tls/tls.crt", "--tls-key-file=/var/run/promptops/tls/tls.key"}) || serve.Spec.Template.Spec.Containers[0].ReadinessProbe == nil {
			t.Errorf("serve: %+v", serve.Spec.Template.Spec.Containers)
		}
		// With cert-manager, serve's certificate is a Certificate for its
		// Service's names, from the chart's Issuer, into the mounted Secret.
		var cert *unstructured.Unstructured
		for _, u := range objs {
			if u.GetKind() == "Certificate" && u.GetName() == "promptops-serve" {
				cert = u
			}
		}
		if cert == nil {
			t.Fatal("no Certificate promptops-serve")
		}
		names, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
		secretName, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
		issuer, _, _ := unstructured.NestedString(cert.Object, "spec", "issuerRef", "name")
		if !slices.Contains(names, "promptops-serve."+namespace+".svc") || secretName != "promptops-serve-tls" || issuer != "promptops-selfsigned" {
			t.Errorf("serve Certificate: %v", cert.Object["spec"])
		}
		if find(t, objs, "Secret", "promptops-serve-tls", nil) {
			t.Error("a Secret made by Helm beside cert-manager's")
		}
		role := &rbacv1.ClusterRole{}
		find(t, objs, "ClusterRole", "promptops-serve", role)
		checkServeReadRules(t, role.Rules)
		checkServeAuthRole(t, objs)
		if find(t, objs, "Role", "promptops-serve", nil) || find(t, objs, "NetworkPolicy", "promptops-manager", nil) {
			t.Error("namespaced serve Roles or NetworkPolicies without their values")
		}
	})
	t.Run("tokenizers", func(t *testing.T) {
		// The manager and serve both read the supplied vocabularies from
		// the one volume, read-only, beside the manager's webhook certs.
		objs := render(t, valueSets["tokenizers"]...)
		d, c := managerContainer(t, objs)
		serve := &appsv1.Deployment{}
		if !find(t, objs, "Deployment", "promptops-serve", serve) {
			t.Fatal("no serve")
		}
		for _, pod := range []*corev1.PodSpec{&d.Spec.Template.Spec, &serve.Spec.Template.Spec} {
			c := &pod.Containers[0]
			if env(c, "PROMPTOPS_TOKENIZERS_DIR") != "/var/run/promptops/tokenizers" {
				t.Errorf("%s: PROMPTOPS_TOKENIZERS_DIR %q", c.Name, env(c, "PROMPTOPS_TOKENIZERS_DIR"))
			}
			i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "tokenizers" })
			if i < 0 || c.VolumeMounts[i].MountPath != "/var/run/promptops/tokenizers" || !c.VolumeMounts[i].ReadOnly {
				t.Errorf("%s: mounts %+v", c.Name, c.VolumeMounts)
			}
			j := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == "tokenizers" })
			if j < 0 || pod.Volumes[j].PersistentVolumeClaim == nil || pod.Volumes[j].PersistentVolumeClaim.ClaimName != "model-files" {
				t.Errorf("%s: volumes %+v", c.Name, pod.Volumes)
			}
		}
		if len(c.VolumeMounts) != 2 || len(d.Spec.Template.Spec.Volumes) != 2 {
			t.Errorf("manager: the webhook's certificates and the tokenizers, got %+v", c.VolumeMounts)
		}
		// Without the value, nothing of it.
		_, c = managerContainer(t, render(t))
		if env(c, "PROMPTOPS_TOKENIZERS_DIR") != "" || len(c.VolumeMounts) != 0 {
			t.Errorf("tokenizers by default: %+v", c)
		}
	})
	t.Run("serve in some namespaces, network policies", func(t *testing.T) {
		objs := render(t, valueSets["namespaced"]...)
		serve := &appsv1.Deployment{}
		if !find(t, objs, "Deployment", "promptops-serve", serve) || !slices.Contains(serve.Spec.Template.Spec.Containers[0].Args, "--namespace=team-a,team-b") || !slices.Contains(serve.Spec.Template.Spec.Containers[0].Args, "--auth=kubernetes") {
			t.Errorf("serve args: %q", serve.Spec.Template.Spec.Containers[0].Args)
		}
		if find(t, objs, "ClusterRole", "promptops-serve", nil) || find(t, objs, "ClusterRoleBinding", "promptops-serve", nil) {
			t.Error("serve reads every namespace although serve.namespaces is set")
		}
		var roles, bindings []string
		for _, u := range objs {
			switch {
			case u.GetKind() == "Role" && u.GetName() == "promptops-serve":
				role := &rbacv1.Role{}
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, role); err != nil {
					t.Fatal(err)
				}
				checkServeReadRules(t, role.Rules)
				roles = append(roles, u.GetNamespace())
			case u.GetKind() == "RoleBinding" && u.GetName() == "promptops-serve":
				rb := &rbacv1.RoleBinding{}
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, rb); err != nil {
					t.Fatal(err)
				}
				if rb.RoleRef.Kind != "Role" || len(rb.Subjects) != 1 || rb.Subjects[0].Name != "promptops-serve" || rb.Subjects[0].Namespace != namespace {
					t.Errorf("RoleBinding in %s: %+v", rb.Namespace, rb)
				}
				bindings = append(bindings, u.GetNamespace())
			}
		}
		if !slices.Equal(roles, servedNamespaces) || !slices.Equal(bindings, servedNamespaces) {
			t.Errorf("Roles in %v, RoleBindings in %v, want %v", roles, bindings, servedNamespaces)
		}
		checkServeAuthRole(t, objs)

		mgr, srv := &networkingv1.NetworkPolicy{}, &networkingv1.NetworkPolicy{}
		if !find(t, objs, "NetworkPolicy", "promptops-manager", mgr) || !find(t, objs, "NetworkPolicy", "promptops-serve", srv) {
			t.Fatal("no NetworkPolicies")
		}
		var ports []string
		for _, r := range mgr.Spec.Ingress {
			for _, p := range r.Ports {
				ports = append(ports, p.Port.String())
			}
		}
		if !slices.Equal(ports, []string{"metrics", "probes", "webhook"}) || mgr.Spec.PodSelector.MatchLabels["app.kubernetes.io/component"] != "manager" {
			t.Errorf("manager policy: %+v", mgr.Spec)
		}
		if len(srv.Spec.Ingress) != 1 || srv.Spec.Ingress[0].Ports[0].Port.String() != "https" || len(srv.Spec.Ingress[0].From) != 1 || srv.Spec.PodSelector.MatchLabels["app.kubernetes.io/component"] != "serve" {
			t.Errorf("serve policy: %+v", srv.Spec)
		}
		// The named ports exist in the pods they select.
		_, c := managerContainer(t, objs)
		for _, name := range []string{"metrics", "probes", "webhook"} {
			if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == name }) {
				t.Errorf("the manager has no port %s", name)
			}
		}
		if serve.Spec.Template.Spec.Containers[0].Ports[0].Name != "https" {
			t.Errorf("serve ports: %+v", serve.Spec.Template.Spec.Containers[0].Ports)
		}
	})
	t.Run("serve TLS without cert-manager", func(t *testing.T) {
		// On by default: a CA and certificate Helm makes for the Service's
		// names, mounted and reloaded by serve; probes and Service HTTPS.
		objs := render(t, "serve.enabled=true")
		serve := &appsv1.Deployment{}
		if !find(t, objs, "Deployment", "promptops-serve", serve) {
			t.Fatal("no serve")
		}
		pod := serve.Spec.Template.Spec
		c := pod.Containers[0]
		for _, a := range []string{"--tls-cert-file=/var/run/promptops/tls/tls.crt", "--tls-key-file=/var/run/promptops/tls/tls.key"} {
			if !slices.Contains(c.Args, a) {
				t.Errorf("serve args %q lack %s", c.Args, a)
			}
		}
		for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
			if p == nil || p.HTTPGet == nil || p.HTTPGet.Scheme != corev1.URISchemeHTTPS || p.HTTPGet.Port.StrVal != "https" {
				t.Errorf("probe %+v", p)
			}
		}
		if !slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == "promptops-serve-tls" }) ||
			!slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/var/run/promptops/tls" && m.ReadOnly }) {
			t.Errorf("the certificate's Secret is not mounted: %+v %+v", pod.Volumes, c.VolumeMounts)
		}
		svc := &corev1.Service{}
		if !find(t, objs, "Service", "promptops-serve", svc) || svc.Spec.Ports[0].Name != "https" || svc.Spec.Ports[0].TargetPort.StrVal != "https" {
			t.Errorf("serve Service: %+v", svc.Spec.Ports)
		}
		secret := &corev1.Secret{}
		if !find(t, objs, "Secret", "promptops-serve-tls", secret) || secret.Type != corev1.SecretTypeTLS {
			t.Fatalf("no Secret promptops-serve-tls of type kubernetes.io/tls: %+v", secret.Type)
		}
		pair, err := tls.X509KeyPair(secret.Data["tls.crt"], secret.Data["tls.key"])
		if err != nil {
			t.Fatal(err)
		}
		leaf, _ := x509.ParseCertificate(pair.Certificate[0])
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(secret.Data["ca.crt"]) {
			t.Fatal("no ca.crt")
		}
		for _, name := range []string{"promptops-serve." + namespace + ".svc", "promptops-serve." + namespace + ".svc.cluster.local"} {
			if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: pool}); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
		if find(t, objs, "Certificate", "promptops-serve", nil) || find(t, objs, "Issuer", "promptops-selfsigned", nil) {
			t.Error("cert-manager objects without certManager.enabled")
		}
	})
	t.Run("serve TLS from a Secret, memory CAs, plain HTTP", func(t *testing.T) {
		objs := render(t, "serve.enabled=true", "serve.tls.secretName=mine", "serve.memoryCA.configMap.name=bank-cas", "certManager.memoryIssuerRef.kind=ClusterIssuer", "certManager.memoryIssuerRef.name=cluster-ca")
		serve := &appsv1.Deployment{}
		find(t, objs, "Deployment", "promptops-serve", serve)
		pod := serve.Spec.Template.Spec
		if !slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == "mine" }) ||
			!slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool { return v.ConfigMap != nil && v.ConfigMap.Name == "bank-cas" }) ||
			!slices.Contains(pod.Containers[0].Args, "--memory-ca-file=/var/run/promptops/memory-ca/ca.crt") {
			t.Errorf("serve: %+v %q", pod.Volumes, pod.Containers[0].Args)
		}
		if find(t, objs, "Secret", "promptops-serve-tls", nil) || find(t, objs, "Secret", "mine", nil) {
			t.Error("a Secret made beside the one given")
		}
		if _, c := managerContainer(t, objs); !slices.Contains(c.Args, "--memory-cert-issuer=ClusterIssuer/cluster-ca") {
			t.Errorf("manager args %q", c.Args)
		}
		objs = render(t, "serve.enabled=true", "serve.tls.enabled=false")
		find(t, objs, "Deployment", "promptops-serve", serve)
		c := serve.Spec.Template.Spec.Containers[0]
		if !slices.Contains(c.Args, "--plain-http") || slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--tls-") }) ||
			c.ReadinessProbe.HTTPGet.Scheme != corev1.URISchemeHTTP || c.Ports[0].Name != "http" {
			t.Errorf("serve without TLS: %q %+v", c.Args, c.ReadinessProbe)
		}
	})
	t.Run("job image", func(t *testing.T) {
		_, c := managerContainer(t, render(t, valueSets["job-image"]...))
		if c.Image != "registry.example/promptops:v9" || env(c, "PROMPTOPS_JOB_IMAGE") != "registry.example/promptops:v9-jobs" {
			t.Errorf("image %s, job image %s", c.Image, env(c, "PROMPTOPS_JOB_IMAGE"))
		}
	})
	t.Run("extra args and log level", func(t *testing.T) {
		_, c := managerContainer(t, render(t, valueSets["webhook"]...))
		for _, a := range []string{"--zap-log-level=debug", "--max-concurrent-reconciles=8", "--webhook-self-signed", "--webhook-cert-hosts=promptops-webhook.promptops-system.svc"} {
			if !slices.Contains(c.Args, a) {
				t.Errorf("args %q lack %s", c.Args, a)
			}
		}
	})
	t.Run("no extras", func(t *testing.T) {
		objs := render(t, valueSets["no-extras"]...)
		_, c := managerContainer(t, objs)
		if slices.Contains(c.Args, "--leader-elect") || slices.Contains(c.Args, "--metrics-secure") || find(t, objs, "ClusterRole", "promptops-editor", nil) {
			t.Errorf("args %q", c.Args)
		}
	})
	t.Run("self-signed webhook needs one replica", func(t *testing.T) {
		_, err := helm(t, "template", "promptops", chartDir(), "--set", "webhook.enabled=true", "--set", "replicaCount=2")
		if err == nil || !strings.Contains(err.Error(), "needs certManager.enabled") {
			t.Errorf("want a failure naming certManager.enabled, got %v", err)
		}
	})
}

// TestChartAppliesToTheAPIServer applies what the chart renders (CRDs
// included) with server-side apply and dry run, as
// `helm template | kubectl apply --server-side --dry-run=server` does. Kinds
// of other operators (ServiceMonitor, cert-manager) are left out: the test
// control plane has no CRDs for them.
func TestChartAppliesToTheAPIServer(t *testing.T) {
	c := controlPlane(t)
	ctx := context.Background()
	for _, ns := range servedNamespaces {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"defaults", "webhook", "no-extras", "job-image", "serviceacct", "namespaced"} {
		t.Run(name, func(t *testing.T) {
			objs := render(t, valueSets[name]...)
			if len(objs) < 10 {
				t.Fatalf("only %d objects", len(objs))
			}
			for _, u := range objs {
				if strings.HasSuffix(u.GroupVersionKind().Group, "coreos.com") || strings.HasSuffix(u.GroupVersionKind().Group, "cert-manager.io") {
					continue
				}
				if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.DryRunAll, client.ForceOwnership, client.FieldOwner("helm")); err != nil {
					t.Errorf("%s %s: %v", u.GetKind(), u.GetName(), err)
				}
			}
		})
	}
}

// checkServeReadRules: serve reads ConfigMaps and PromptTemplates, nothing more.
func checkServeReadRules(t *testing.T, rules []rbacv1.PolicyRule) {
	t.Helper()
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"promptops.io"}, Resources: []string{"prompttemplates"}, Verbs: []string{"get", "list", "watch"}},
	}
	if !equality.Semantic.DeepEqual(rules, want) {
		t.Errorf("serve rules: %+v", rules)
	}
}

// checkServeAuthRole: --auth=kubernetes creates TokenReviews and
// SubjectAccessReviews, bound to serve's ServiceAccount.
func checkServeAuthRole(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	role, binding := &rbacv1.ClusterRole{}, &rbacv1.ClusterRoleBinding{}
	if !find(t, objs, "ClusterRole", "promptops-serve-auth", role) || !find(t, objs, "ClusterRoleBinding", "promptops-serve-auth", binding) {
		t.Fatal("no promptops-serve-auth ClusterRole and binding")
	}
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
	}
	if !equality.Semantic.DeepEqual(role.Rules, want) || binding.Subjects[0].Name != "promptops-serve" {
		t.Errorf("serve auth role: %+v, %+v", role.Rules, binding.Subjects)
	}
}

var (
	cpOnce   sync.Once
	cpEnv    *envtest.Environment
	cpClient client.Client
	cpErr    error
)

// controlPlane is the package's one test control plane, with the CRDs and
// the install namespace (created for real, so that the namespaced objects'
// dry runs find it); TestMain stops it.
func controlPlane(t *testing.T) client.Client {
	t.Helper()
	cpOnce.Do(func() {
		var cfg *rest.Config
		if cpEnv, cfg, cpErr = testenv.Start(); cpErr != nil {
			return
		}
		if cpClient, cpErr = client.New(cfg, client.Options{Scheme: controllers.NewScheme()}); cpErr != nil {
			return
		}
		cpErr = cpClient.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})
	})
	if cpErr != nil {
		t.Fatal(cpErr)
	}
	return cpClient
}

func TestMain(m *testing.M) {
	code := m.Run()
	if cpEnv != nil {
		_ = cpEnv.Stop()
	}
	os.Exit(code)
}
