package controllers

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	promptopsv1 "github.com/promptops/promptops/api/v1"
)

const (
	// configDir is where the consolidation ConfigMap's mission is mounted.
	configDir = "/etc/promptops"
	// tmpDir is the pod's writable scratch directory (the root is read-only).
	tmpDir      = "/tmp"
	missionKey  = "mission.txt"
	promptKey   = "prompt.txt"
	settingsKey = "settings.json"
	// jobUID is the non-root user of the consolidation pod (the image's USER).
	jobUID = int64(65532)
	// annotationScheduledAt on a Job is the schedule slot it runs for.
	annotationScheduledAt = "promptops.io/scheduled-at"
)

// ConsolidateExitNoProgress is the exit code of `promptops consolidate` when
// facts failed and none was consolidated; the Job fails at once on it.
const ConsolidateExitNoProgress int32 = 3

func consolidationName(mb *promptopsv1.MemoryBank) string { return mb.Name + "-consolidation" }

// scheduledJobName is derived from the schedule slot, so a restarted
// operator finds the Job it already created instead of making another.
func scheduledJobName(mb *promptopsv1.MemoryBank, slot time.Time) string {
	return fmt.Sprintf("%s-%d", mb.Name, slot.Unix()/60)
}

// maxRequestJobNames bounds the names tried for one request.
const maxRequestJobNames = 10

// requestJobName is derived from the annotation's value and the value
// handled before it: a restarted operator derives the name of the Job it
// created for the current request, and reusing an earlier value (A, B, A)
// gives a new name. attempt > 0 gives the alternatives tried while finished
// Jobs of earlier requests hold the name. At most 63 characters for a
// bank name of 48.
func requestJobName(mb *promptopsv1.MemoryBank, previous, request string, attempt int) string {
	h := sha256.New()
	fmt.Fprintf(h, "%d:%s%d:%s", len(previous), previous, len(request), request)
	if attempt > 0 {
		fmt.Fprintf(h, "#%d", attempt)
	}
	return fmt.Sprintf("%s-manual-%s", mb.Name, hex.EncodeToString(h.Sum(nil))[:7])
}

func bankOwner(mb *promptopsv1.MemoryBank) owner {
	return owner{kind: "MemoryBank", name: mb.Name, ns: mb.Namespace, uid: mb.UID, ownerLabel: promptopsv1.LabelMemoryBank}
}

func ptrTo[T any](v T) *T { return &v }

// desiredJob is the consolidation Job of one run: the operator's image
// running `promptops consolidate`, configured through the environment,
// secrets only through secretKeyRef, under the Restricted Pod Security
// profile.
func desiredJob(mb *promptopsv1.MemoryBank, name, image, missionHash string, annotations map[string]string, extraEnv ...corev1.EnvVar) *batchv1.Job {
	c := mb.Spec.Consolidation
	if c.Image != "" {
		image = c.Image
	}
	env := []corev1.EnvVar{
		{Name: "PROMPTOPS_BANK", Value: mb.Namespace + "/" + mb.Name},
		{Name: "PROMPTOPS_LLM_BASE_URL", Value: mb.Spec.LLM.BaseURL},
		{Name: "PROMPTOPS_MODEL", Value: mb.Spec.LLM.Model},
		{Name: "PROMPTOPS_ENCODING", Value: string(orDefault(mb.Spec.LLM.Encoding, promptopsv1.DefaultEncoding))},
		{Name: "PROMPTOPS_MAX_PROMPT_TOKENS", Value: itoa(orDefault(mb.Spec.LLM.MaxPromptTokens, promptopsv1.DefaultMaxPromptTokens))},
		{Name: "PROMPTOPS_LLM_TIMEOUT_SECONDS", Value: itoa(orDefault(mb.Spec.LLM.TimeoutSeconds, promptopsv1.DefaultLLMTimeoutSeconds))},
		{Name: "PROMPTOPS_BATCH_SIZE", Value: itoa(orDefault(c.BatchSize, promptopsv1.DefaultBatchSize))},
		{Name: "PROMPTOPS_MAX_FACTS", Value: itoa(orDefault(c.MaxFactsPerRun, promptopsv1.DefaultMaxFactsPerRun))},
		{Name: "PROMPTOPS_MAX_ATTEMPTS", Value: itoa(orDefault(c.MaxAttempts, promptopsv1.DefaultMaxAttempts))},
		{Name: "PROMPTOPS_PARALLELISM", Value: itoa(orDefault(c.Parallelism, promptopsv1.DefaultParallelism))},
		{Name: "PROMPTOPS_MAX_TOKENS_PER_RUN", Value: itoa(orDefault(c.MaxTokensPerRun, promptopsv1.DefaultMaxTokensPerRun))},
		{Name: "PROMPTOPS_MISSION_FILE", Value: path.Join(configDir, missionKey)},
		{Name: "PROMPTOPS_TERMINATION_LOG", Value: "/dev/termination-log"},
	}
	env = append(env, embeddingsEnv(mb)...)
	if mb.Spec.MaxObservations != nil {
		env = append(env, corev1.EnvVar{Name: "PROMPTOPS_MAX_OBSERVATIONS", Value: itoa(*mb.Spec.MaxObservations)})
	}
	if mb.Spec.MaxObservationsPerScope != nil {
		env = append(env, corev1.EnvVar{Name: "PROMPTOPS_MAX_OBSERVATIONS_PER_SCOPE", Value: itoa(*mb.Spec.MaxObservationsPerScope)})
	}
	storeVar, storeVolumes, storeMounts := storePod(mb)
	env = append(env, storeVar)
	volumes := append([]corev1.Volume{
		{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: consolidationName(mb)},
		}}},
	}, storeVolumes...)
	mounts := append([]corev1.VolumeMount{
		// A subPath mount is not updated when the ConfigMap changes: a
		// running Job keeps the mission it started with.
		{Name: "config", MountPath: path.Join(configDir, missionKey), SubPath: missionKey, ReadOnly: true},
	}, storeMounts...)
	if ref := mb.Spec.LLM.APIKeySecretRef; ref != nil {
		env = append(env, corev1.EnvVar{Name: "OPENAI_API_KEY", ValueFrom: secretEnv(*ref)})
	}
	env = append(env, extraEnv...)
	labels := map[string]string{
		promptopsv1.LabelManagedBy:  promptopsv1.LabelManagedByValue,
		promptopsv1.LabelMemoryBank: mb.Name,
	}
	ann := map[string]string{promptopsv1.AnnotationMissionHash: missionHash}
	for k, v := range annotations {
		ann[k] = v
	}
	container := corev1.Container{
		Name:                     "consolidate",
		Image:                    image,
		Args:                     append([]string{"consolidate"}, redactionArgs(mb)...),
		Env:                      env,
		VolumeMounts:             mounts,
		TerminationMessagePath:   "/dev/termination-log",
		TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		SecurityContext:          restrictedContainer(),
	}
	if c.Resources != nil {
		container.Resources = *c.Resources
	}
	job := &batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: mb.Namespace, Labels: labels, Annotations: ann},
		Spec: batchv1.JobSpec{
			BackoffLimit:          ptrTo(valueOr(c.BackoffLimit, promptopsv1.DefaultBackoffLimit)),
			ActiveDeadlineSeconds: ptrTo(orDefault(c.ActiveDeadlineSeconds, promptopsv1.DefaultActiveDeadlineSeconds)),
			// A run whose every fact failed is not retried: the facts are
			// marked failed, so a new pod would find nothing and succeed.
			PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
				Action:      batchv1.PodFailurePolicyActionFailJob,
				OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{ContainerName: ptrTo("consolidate"), Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{ConsolidateExitNoProgress}},
			}}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: ann},
				Spec: corev1.PodSpec{
					RestartPolicy:                corev1.RestartPolicyNever,
					ServiceAccountName:           c.ServiceAccountName,
					AutomountServiceAccountToken: ptrTo(false),
					NodeSelector:                 c.NodeSelector,
					Tolerations:                  c.Tolerations,
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptrTo(true),
						RunAsUser:      ptrTo(jobUID),
						RunAsGroup:     ptrTo(jobUID),
						FSGroup:        ptrTo(jobUID),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []corev1.Container{container},
					Volumes:    volumes,
				},
			},
		},
	}
	return job
}

// embeddingsEnv configures spec.embeddings, its key only through
// secretKeyRef; empty without embeddings.
func embeddingsEnv(mb *promptopsv1.MemoryBank) []corev1.EnvVar {
	e := mb.Spec.Embeddings
	if e == nil {
		return nil
	}
	env := []corev1.EnvVar{
		{Name: "PROMPTOPS_EMBEDDINGS_BASE_URL", Value: e.BaseURL},
		{Name: "PROMPTOPS_EMBEDDINGS_MODEL", Value: e.Model},
		{Name: "PROMPTOPS_EMBEDDINGS_TIMEOUT_SECONDS", Value: itoa(orDefault(e.TimeoutSeconds, promptopsv1.DefaultEmbeddingsTimeoutSeconds))},
		{Name: "PROMPTOPS_EMBEDDINGS_BATCH_SIZE", Value: itoa(orDefault(e.BatchSize, promptopsv1.DefaultEmbeddingsBatchSize))},
		{Name: "PROMPTOPS_RECALL_SIMILARITY", Value: itoa(orDefault(e.RecallSimilarity, promptopsv1.DefaultRecallSimilarityPerMille))},
		{Name: "PROMPTOPS_MAX_REEMBED_PER_RUN", Value: itoa(orDefault(e.MaxReembedPerRun, promptopsv1.DefaultMaxReembedPerRun))},
		{Name: "PROMPTOPS_DUPLICATE_SIMILARITY", Value: itoa(orDefault(mb.Spec.Consolidation.DuplicateSimilarity, promptopsv1.DefaultDuplicateSimilarityPerMille))},
	}
	if e.Dimensions != nil {
		env = append(env, corev1.EnvVar{Name: "PROMPTOPS_EMBEDDINGS_DIMENSIONS", Value: itoa(*e.Dimensions)})
	}
	if ref := e.APIKeySecretRef; ref != nil {
		env = append(env, corev1.EnvVar{Name: "PROMPTOPS_EMBEDDINGS_API_KEY", ValueFrom: secretEnv(*ref)})
	}
	return env
}

// storePod is what a pod needs to open the bank's store: PROMPTOPS_STORE
// (a PostgreSQL DSN only through secretKeyRef), a writable /tmp (the root
// file system is read-only) and, for SQLite, the file's directory.
func storePod(mb *promptopsv1.MemoryBank) (corev1.EnvVar, []corev1.Volume, []corev1.VolumeMount) {
	volumes := []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	mounts := []corev1.VolumeMount{{Name: "tmp", MountPath: tmpDir}}
	var env corev1.EnvVar
	switch s := mb.Spec.Store; {
	case s.Postgres != nil:
		env = corev1.EnvVar{Name: "PROMPTOPS_STORE", ValueFrom: secretEnv(s.Postgres.DSNSecretRef)}
	case s.SQLite != nil:
		env = corev1.EnvVar{Name: "PROMPTOPS_STORE", Value: "sqlite://" + s.SQLite.Path}
		dir := path.Dir(s.SQLite.Path)
		claim := s.SQLite.PersistentVolumeClaimName
		switch {
		case dir == tmpDir && claim == "":
			// The pod's /tmp emptyDir holds the file; a second mount at
			// /tmp would make the pod invalid.
		case dir == tmpDir:
			// The claim serves as /tmp.
			volumes[0] = corev1.Volume{Name: "data", VolumeSource: claimVolume(claim)}
			mounts[0] = corev1.VolumeMount{Name: "data", MountPath: tmpDir}
		default:
			data := corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
			if claim != "" {
				data = claimVolume(claim)
			}
			volumes = append(volumes, corev1.Volume{Name: "data", VolumeSource: data})
			mounts = append(mounts, corev1.VolumeMount{Name: "data", MountPath: dir})
		}
	}
	return env, volumes, mounts
}

func claimVolume(name string) corev1.VolumeSource {
	return corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}}
}

func secretEnv(ref promptopsv1.SecretKeyRef) *corev1.EnvVarSource {
	return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: ref.Name}, Key: ref.Key}}
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

func valueOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

func itoa[T int32 | int64 | int](v T) string { return strconv.FormatInt(int64(v), 10) }

// restrictedContainer is the security context of the operator's pods'
// containers (consolidation Jobs, memory servers): the Restricted profile,
// with a read-only root file system.
func restrictedContainer() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptrTo(false),
		ReadOnlyRootFilesystem:   ptrTo(true),
		RunAsNonRoot:             ptrTo(true),
		RunAsUser:                ptrTo(jobUID),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}
