package v1

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestCRDDefaultsMatchConstants ties the generated CRDs' default markers to
// the Go constants the controllers and the Job fall back on.
func TestCRDDefaultsMatchConstants(t *testing.T) {
	for _, tc := range []struct {
		crd  string
		path []string
		want any
	}{
		{"memorybanks", []string{"spec", "llm", "encoding"}, string(DefaultEncoding)},
		{"memorybanks", []string{"spec", "llm", "maxPromptTokens"}, DefaultMaxPromptTokens},
		{"memorybanks", []string{"spec", "llm", "timeoutSeconds"}, DefaultLLMTimeoutSeconds},
		{"memorybanks", []string{"spec", "consolidation", "batchSize"}, DefaultBatchSize},
		{"memorybanks", []string{"spec", "consolidation", "maxFactsPerRun"}, DefaultMaxFactsPerRun},
		{"memorybanks", []string{"spec", "consolidation", "maxAttempts"}, DefaultMaxAttempts},
		{"memorybanks", []string{"spec", "consolidation", "parallelism"}, DefaultParallelism},
		{"memorybanks", []string{"spec", "consolidation", "maxTokensPerRun"}, DefaultMaxTokensPerRun},
		{"memorybanks", []string{"spec", "consolidation", "activeDeadlineSeconds"}, DefaultActiveDeadlineSeconds},
		{"memorybanks", []string{"spec", "consolidation", "backoffLimit"}, DefaultBackoffLimit},
		{"memorybanks", []string{"spec", "consolidation", "successfulJobsHistoryLimit"}, DefaultSuccessfulJobsHistoryLimit},
		{"memorybanks", []string{"spec", "consolidation", "failedJobsHistoryLimit"}, DefaultFailedJobsHistoryLimit},
		{"memorybanks", []string{"spec", "consolidation", "duplicateSimilarity"}, DefaultDuplicateSimilarityPerMille},
		{"memorybanks", []string{"spec", "embeddings", "timeoutSeconds"}, DefaultEmbeddingsTimeoutSeconds},
		{"memorybanks", []string{"spec", "embeddings", "batchSize"}, DefaultEmbeddingsBatchSize},
		{"memorybanks", []string{"spec", "embeddings", "recallSimilarity"}, DefaultRecallSimilarityPerMille},
		{"memorybanks", []string{"spec", "embeddings", "maxReembedPerRun"}, DefaultMaxReembedPerRun},
		{"memorybanks", []string{"spec", "extraction", "maxPromptTokens"}, DefaultExtractionMaxPromptTokens},
		{"memorybanks", []string{"spec", "extraction", "contextMessages"}, DefaultExtractionContextMessages},
		{"memorybanks", []string{"spec", "extraction", "messagesPerBatch"}, DefaultExtractionMessagesPerBatch},
		{"memorybanks", []string{"spec", "serving", "replicas"}, DefaultServingReplicas},
		{"prompttemplates", []string{"spec", "encoding"}, string(DefaultEncoding)},
		{"prompttemplates", []string{"spec", "budget", "onExceed"}, string(DefaultOnExceed)},
		{"prompttemplates", []string{"spec", "specialTokens"}, string(DefaultSpecialTokens)},
		{"prompttemplates", []string{"spec", "revisionHistoryLimit"}, DefaultRevisionHistoryLimit},
		{"prompttemplates", []string{"spec", "sections", "[]", "truncation", "policy"}, string(DefaultTruncationPolicy)},
		{"prompttemplates", []string{"spec", "rollout", "analysis", "interval"}, DefaultAnalysisInterval},
		{"prompttemplates", []string{"spec", "rollout", "analysis", "failureLimit"}, DefaultAnalysisFailureLimit},
	} {
		root := crdRoot(t, tc.crd)
		for _, p := range tc.path {
			if p == "[]" {
				root = *root.Items
			} else {
				root = root.Properties[p]
			}
		}
		want, _ := json.Marshal(tc.want)
		if string(root.Default) != string(want) {
			t.Errorf("CRD %s: default of %v is %s, the constant is %s", tc.crd, tc.path, root.Default, want)
		}
	}
}

func crdRoot(t *testing.T, name string) crdSchema {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", "bases", "promptops.io_"+name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Schema struct {
					OpenAPIV3Schema crdSchema `json:"openAPIV3Schema"`
				}
			}
		}
	}
	if err := yaml.Unmarshal(data, &crd); err != nil || len(crd.Spec.Versions) != 1 {
		t.Fatalf("%s: %v, %d versions", name, err, len(crd.Spec.Versions))
	}
	return crd.Spec.Versions[0].Schema.OpenAPIV3Schema
}

// crdSchema is the part of an OpenAPI schema the test reads.
type crdSchema struct {
	Properties map[string]crdSchema `json:"properties"`
	Items      *crdSchema           `json:"items"`
	Default    json.RawMessage      `json:"default"`
}
