{{/*
Names: the release name when it contains "ksched" (release "ksched" renders the
kustomize base's names), else "<release>-ksched". The ClusterRole's
resourceNames, the Lease, the webhook configuration, the webhook's Secret and
the Service DNS names in the configuration all derive from it, so they always agree.
*/}}
{{- define "ksched.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "ksched.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "ksched.labels" -}}
{{ include "ksched.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The webhook is rendered when enabled, except in shadow mode (ksched binds nothing there). */}}
{{- define "ksched.webhookEnabled" -}}
{{- if and .Values.webhook.enabled (not .Values.shadow.enabled) -}}true{{- end -}}
{{- end -}}

{{/*
The KschedConfiguration: the configuration block, with the keys whose values
other objects of the chart depend on set from the chart.
*/}}
{{- define "ksched.configuration" -}}
{{- $name := include "ksched.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- $chart := dict
  "apiVersion" "ksched.io/v1alpha1"
  "kind" "KschedConfiguration"
  "leaderElection" (dict "resourceName" $name "resourceNamespace" $ns)
  "handoff" (dict "enabled" .Values.handoff.enabled "after" .Values.handoff.after)
-}}
{{- if include "ksched.webhookEnabled" . -}}
{{- $_ := set $chart "webhook" (dict
  "enabled" true
  "address" "0.0.0.0:9443"
  "hosts" (list (printf "%s.%s.svc" $name $ns) (printf "%s.%s.svc.cluster.local" $name $ns))
  "configurationName" $name
  "secretName" (printf "%s-webhook-tls" $name)) -}}
{{- end -}}
{{- if .Values.shadow.enabled -}}
{{- $_ := set $chart "shadow" (merge (dict "enabled" true) (omit .Values.shadow "enabled")) -}}
{{- end -}}
{{- if .Values.rebalance.enabled -}}
{{- $_ := set $chart "rebalance" (merge (dict "enabled" true) (omit .Values.rebalance "enabled")) -}}
{{- else if (.Values.configuration.rebalance | default dict).enabled -}}
{{- fail "enable rebalancing with rebalance.enabled, not configuration.rebalance: the chart grants the eviction RBAC with it" -}}
{{- end -}}
{{- if .Values.steering.enabled -}}
{{- $_ := set $chart "steering" (merge (dict "enabled" true) (omit .Values.steering "enabled")) -}}
{{- else if (.Values.configuration.steering | default dict).enabled -}}
{{- fail "enable steering with steering.enabled, not configuration.steering: the chart grants the node patch RBAC with it" -}}
{{- end -}}
{{- if .Values.sharding.enabled -}}
{{- $_ := set $chart "sharding" (merge (dict "enabled" true) (omit .Values.sharding "enabled")) -}}
{{- else if (.Values.configuration.sharding | default dict).enabled -}}
{{- fail "enable sharding with sharding.enabled, not configuration.sharding: the chart grants the Lease RBAC with it" -}}
{{- end -}}
{{- toYaml (mergeOverwrite (deepCopy .Values.configuration) $chart) -}}
{{- end -}}
