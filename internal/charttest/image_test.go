package charttest

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/promptops/promptops/internal/testenv"
)

// TestOneImageEverywhere: the chart, config/default, the serve samples, the
// Makefile's image target and the README name one image,
// promptops/promptops:<the chart's appVersion>, the one `make image` builds.
func TestOneImageEverywhere(t *testing.T) {
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	readFile(t, "charts/promptops/Chart.yaml", &chart)
	want := "promptops/promptops:" + chart.AppVersion

	// A loaded image (kind load, ctr images import; the README's Deploying)
	// is not pulled: IfNotPresent, the Kubernetes default for a pinned tag,
	// in both installs.
	if _, c := managerContainer(t, render(t)); c.Image != want || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("chart: %s (pull policy %q), want %s (IfNotPresent)", c.Image, c.ImagePullPolicy, want)
	}
	for _, o := range kustomize(t) {
		if o.GetKind() != "Deployment" {
			continue
		}
		var d struct {
			Spec struct {
				Template corev1.PodTemplateSpec `json:"template"`
			} `json:"spec"`
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
			t.Fatal(err)
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			if c.Image != want || c.ImagePullPolicy != corev1.PullIfNotPresent {
				t.Errorf("config/default %s: container %s runs %s (pull policy %q), want %s (IfNotPresent)", o.GetName(), c.Name, c.Image, c.ImagePullPolicy, want)
			}
		}
	}
	root := testenv.Root()
	for _, f := range []string{"config/samples/serve/sidecar.yaml", "config/samples/serve/shared.yaml"} {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			Spec struct {
				Template corev1.PodTemplateSpec `json:"template"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(strings.SplitN(string(data), "\n---", 2)[0]), &d); err != nil {
			t.Fatal(err)
		}
		found := false
		for _, c := range append(d.Spec.Template.Spec.InitContainers, d.Spec.Template.Spec.Containers...) {
			if strings.Contains(c.Image, "promptops") {
				found = true
				if c.Image != want {
					t.Errorf("%s: container %s runs %s, want %s", f, c.Name, c.Image, want)
				}
			}
		}
		if !found {
			t.Errorf("%s: no promptops container", f)
		}
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`promptops/promptops:[A-Za-z0-9._-]+`).FindAllString(string(readme), -1) {
		if m != want {
			t.Errorf("README names %s, want %s", m, want)
		}
	}
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(makefile), "IMAGE ?= promptops/promptops:$(VERSION)") {
		t.Error("the Makefile's IMAGE is not promptops/promptops:$(VERSION)")
	}
	// The one-node cluster builds the same name with ko (docker.io is the
	// name's default registry, so the kubelet finds promptops/promptops:V),
	// tagged with the chart's appVersion.
	cluster, err := os.ReadFile(filepath.Join(root, "hack/cluster.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^OPERATOR_IMAGE_REPO=(docker\.io/)?promptops/promptops$`).Match(cluster) ||
		!strings.Contains(string(cluster), `OPERATOR_IMAGE_TAG="${VERSION:-$(sed -n 's/^appVersion: "\(.*\)"/\1/p' "$ROOT/charts/promptops/Chart.yaml")}"`) {
		t.Error("hack/cluster.sh does not build promptops/promptops:<the chart's appVersion>")
	}
	// The Dockerfile's default version is the chart's, and its images name
	// no registry host, so a mirror's settings (or --build-arg) decide.
	dockerfile, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(dockerfile), "\nARG VERSION="+chart.AppVersion+"\n") {
		t.Errorf("the Dockerfile's ARG VERSION is not %s", chart.AppVersion)
	}
	for _, m := range regexp.MustCompile(`(?m)^(?:FROM|ARG [A-Z_]*IMAGE=)\s*(\S+)`).FindAllSubmatch(dockerfile, -1) {
		if first, _, _ := strings.Cut(string(m[1]), "/"); strings.Contains(string(m[1]), "/") && (strings.ContainsAny(first, ".:") || first == "localhost") {
			t.Errorf("the Dockerfile names a registry host: %s", m[0])
		}
	}
}
