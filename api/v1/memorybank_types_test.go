package v1

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestCRDDefaultsMatchConstants ties the generated CRD's default markers to
// the Go constants the controller falls back on.
func TestCRDDefaultsMatchConstants(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", "bases", "promptops.io_memorybanks.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Name   string
				Schema struct {
					OpenAPIV3Schema crdSchema `json:"openAPIV3Schema"`
				}
			}
		}
	}
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	if len(crd.Spec.Versions) != 1 {
		t.Fatalf("%d versions", len(crd.Spec.Versions))
	}
	root := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	raw := root.Properties["spec"].Properties["consolidation"].Properties["maxTokensPerRun"].Default
	var got int64
	if err := json.Unmarshal(raw, &got); err != nil || got != DefaultMaxTokensPerRun {
		t.Fatalf("CRD default of spec.consolidation.maxTokensPerRun is %s (%v), DefaultMaxTokensPerRun is %d", raw, err, DefaultMaxTokensPerRun)
	}
}

// crdSchema is the part of an OpenAPI schema the test reads.
type crdSchema struct {
	Properties map[string]crdSchema `json:"properties"`
	Default    json.RawMessage      `json:"default"`
}
