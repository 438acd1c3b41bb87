{{/* The chart's name. */}}
{{- define "promptops.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The prefix of every object's name: the release name, with the chart's name unless it contains it. */}}
{{- define "promptops.fullname" -}}
{{- if contains .Chart.Name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "promptops.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "promptops.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "promptops.selectorLabels" -}}
app.kubernetes.io/name: {{ include "promptops.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "promptops.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (printf "%s-manager" (include "promptops.fullname" .)) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "promptops.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Consolidation Jobs run the manager's image unless jobImage says otherwise. */}}
{{- define "promptops.jobImage" -}}
{{- printf "%s:%s" (default .Values.image.repository .Values.jobImage.repository) (default (default .Chart.AppVersion .Values.image.tag) .Values.jobImage.tag) }}
{{- end }}

{{- define "promptops.webhookName" -}}
{{- printf "%s-webhook" (include "promptops.fullname" .) }}
{{- end }}

{{- define "promptops.webhookConfigurationName" -}}
{{- printf "%s-validating-webhook" (include "promptops.fullname" .) }}
{{- end }}

{{- define "promptops.webhookSecretName" -}}
{{- printf "%s-webhook-cert" (include "promptops.fullname" .) }}
{{- end }}

{{/* Fail early on combinations that cannot work. */}}
{{- define "promptops.validate" -}}
{{- if and .Values.webhook.enabled (not .Values.certManager.enabled) (gt (int .Values.replicaCount) 1) }}
{{- fail "webhook.enabled with more than one replica needs certManager.enabled: each replica would keep a self-signed CA of its own" }}
{{- end }}
{{- end }}

{{/*
The tokenizers directory: PROMPTOPS_TOKENIZERS_DIR, its mount and volume,
when .Values.tokenizers.volume is set.
*/}}
{{- define "promptops.tokenizersEnv" -}}
{{- if .Values.tokenizers.volume }}
- name: PROMPTOPS_TOKENIZERS_DIR
  value: /var/run/promptops/tokenizers
{{- end }}
{{- end }}
{{- define "promptops.tokenizersMount" -}}
{{- if .Values.tokenizers.volume }}
- name: tokenizers
  mountPath: /var/run/promptops/tokenizers
  readOnly: true
{{- end }}
{{- end }}
{{- define "promptops.tokenizersVolume" -}}
{{- if .Values.tokenizers.volume }}
- name: tokenizers
  {{- toYaml .Values.tokenizers.volume | nindent 2 }}
{{- end }}
{{- end }}

{{/* The OpenTelemetry variables of opentelemetry.env, with the service's name
unless they name one; the manager passes them on to consolidation Jobs. */}}
{{- define "promptops.otelEnv" -}}
{{- $env := .root.Values.opentelemetry.env }}
{{- if $env }}
{{- if not (hasKey $env "OTEL_SERVICE_NAME") }}
- name: OTEL_SERVICE_NAME
  value: {{ .service | quote }}
{{- end }}
{{- range $k, $v := $env }}
- name: {{ $k }}
  value: {{ $v | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* serve's port name: https unless serve.tls.enabled is false. */}}
{{- define "promptops.servePortName" -}}
{{- if .Values.serve.tls.enabled }}https{{ else }}http{{ end }}
{{- end }}

{{/* The Secret of serve's certificate. */}}
{{- define "promptops.serveTLSSecretName" -}}
{{- .Values.serve.tls.secretName | default (printf "%s-serve-tls" (include "promptops.fullname" .)) }}
{{- end }}

{{/* The self-signed Issuer is the chart's when cert-manager issues a
certificate and no issuerRef is given. */}}
{{- define "promptops.selfSignedIssuer" -}}
{{- if and .Values.certManager.enabled (not .Values.certManager.issuerRef) (or .Values.webhook.enabled (and .Values.serve.enabled .Values.serve.tls.enabled (not .Values.serve.tls.secretName))) }}true{{ end }}
{{- end }}
