package controllers

import (
	"path"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	promptopsv1 "github.com/promptops/promptops/api/v1"
)

// What every pod the operator runs for a bank (its consolidation Jobs and
// its memory server) shares: the store, secrets only by reference, the
// Restricted security context; and the defaults of optional fields.

const (
	// tmpDir is the pod's writable scratch directory (the root is read-only).
	tmpDir = "/tmp"
	// jobUID is the non-root user of the operator's pods (the image's USER).
	jobUID = int64(65532)
)

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

func ptrTo[T any](v T) *T { return &v }
