package v1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Defaults of optional fields, defined once: the controllers and the Job's
// command line fall back on these, the CRD's +kubebuilder:default markers
// say the same, and TestCRDDefaultsMatchConstants ties the two.
const (
	DefaultEncoding                   = EncodingO200K
	DefaultOnExceed                   = OnExceedReject
	DefaultSpecialTokens              = SpecialTokensReject
	DefaultTruncationPolicy           = TruncationPriority
	DefaultRevisionHistoryLimit int32 = 0

	DefaultMaxPromptTokens            int32 = 16000
	DefaultLLMTimeoutSeconds          int32 = 120
	DefaultBatchSize                  int32 = 8
	DefaultMaxFactsPerRun             int32 = 200
	DefaultMaxAttempts                int32 = 3
	DefaultParallelism                int32 = 1
	DefaultMaxTokensPerRun            int64 = 2000000
	DefaultActiveDeadlineSeconds      int64 = 1800
	DefaultBackoffLimit               int32 = 1
	DefaultSuccessfulJobsHistoryLimit int32 = 3
	DefaultFailedJobsHistoryLimit     int32 = 1

	// Embeddings and the duplicate guard. Similarities are cosines per
	// mille (the API has no floats).
	DefaultDuplicateSimilarityPerMille int32 = 970
	DefaultRecallSimilarityPerMille    int32 = 300
	DefaultEmbeddingsTimeoutSeconds    int32 = 60
	DefaultEmbeddingsBatchSize         int32 = 64
	DefaultMaxReembedPerRun            int32 = 20000

	// spec.extraction's defaults.
	DefaultExtractionMaxPromptTokens  int32 = 8000
	DefaultExtractionContextMessages  int32 = 8
	DefaultExtractionMessagesPerBatch int32 = 8

	// DefaultServingReplicas is spec.serving.replicas when unset.
	DefaultServingReplicas int32 = 1

	// A rollout's analysis: spec.rollout.analysis.interval and
	// failureLimit when unset.
	DefaultAnalysisInterval           = "1m"
	DefaultAnalysisFailureLimit int32 = 1
)

// DefaultServingResources are the memory server container's resources when
// spec.serving.resources is unset.
func DefaultServingResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("50m"),
			corev1.ResourceMemory: resource.MustParse("64Mi"),
		},
		Limits: corev1.ResourceList{
			corev1.ResourceMemory: resource.MustParse("256Mi"),
		},
	}
}
