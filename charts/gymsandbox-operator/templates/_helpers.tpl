{{/* Names. Cluster-scoped objects carry the release name, so one cluster can hold several releases. */}}
{{- define "gymsandbox.operatorName" -}}{{ printf "%s-operator" .Release.Name | trunc 63 | trimSuffix "-" }}{{- end }}
{{- define "gymsandbox.brokerName" -}}{{ printf "%s-broker" .Release.Name | trunc 63 | trimSuffix "-" }}{{- end }}
{{- define "gymsandbox.policyName" -}}{{ printf "%s-policy" .Release.Name | trunc 63 | trimSuffix "-" }}{{- end }}

{{- define "gymsandbox.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- if .Values.image.digest -}}{{ .Values.image.repository }}@{{ .Values.image.digest }}{{- else -}}{{ .Values.image.repository }}:{{ $tag }}{{- end -}}
{{- end }}

{{- define "gymsandbox.commonLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: gymsandbox
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Pod selectors: stable across upgrades (a Deployment's selector is immutable). */}}
{{- define "gymsandbox.operatorSelector" -}}
app.kubernetes.io/name: gymsandbox-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
{{- define "gymsandbox.brokerSelector" -}}
app.kubernetes.io/name: gymsandbox-broker
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The metrics port, which must not be one the processes already serve on. */}}
{{- define "gymsandbox.metricsPort" -}}
{{- if or (eq (int .Values.metrics.port) (int .Values.broker.port)) (eq (int .Values.metrics.port) (int .Values.operator.healthPort)) -}}
{{- fail (printf "metrics.port %d is already taken by broker.port or operator.healthPort: choose another" (int .Values.metrics.port)) -}}
{{- end -}}
{{ .Values.metrics.port }}
{{- end }}

{{/* The cluster policy the processes load: the admin's values, plus where this release's broker is. */}}
{{- define "gymsandbox.policy" -}}
{{- $policy := deepCopy .Values.policy -}}
{{- $broker := dict
    "namespace" .Release.Namespace
    "podSelector" (include "gymsandbox.brokerSelector" . | fromYaml)
    "port" (int .Values.broker.port)
    "url" (printf "http://%s.%s.svc:%d" (include "gymsandbox.brokerName" .) .Release.Namespace (int .Values.broker.port)) -}}
{{- $_ := set $policy "broker" $broker -}}
{{- toYaml $policy -}}
{{- end }}

{{/* Restricted-profile container security context shared by both processes. */}}
{{- define "gymsandbox.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end }}
{{- define "gymsandbox.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .Values.securityContext.runAsUser }}
runAsGroup: {{ .Values.securityContext.runAsGroup }}
fsGroup: {{ .Values.securityContext.runAsGroup }}
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* Egress both processes need: the cluster DNS and the API server. */}}
{{- define "gymsandbox.controlPlaneEgress" -}}
# DNS: the cluster resolver only.
- to:
    - namespaceSelector:
        matchLabels:
          kubernetes.io/metadata.name: {{ .Values.policy.dns.namespace }}
      podSelector:
        matchLabels:
          {{- toYaml .Values.policy.dns.podSelector | nindent 10 }}
  ports:
    - {protocol: UDP, port: 53}
    - {protocol: TCP, port: 53}
# The Kubernetes API server.
- ports:
    {{- range .Values.networkPolicy.apiServer.ports }}
    - {protocol: TCP, port: {{ . }}}
    {{- end }}
  {{- with .Values.networkPolicy.apiServer.cidrs }}
  to:
    {{- range . }}
    - ipBlock: {cidr: {{ . }}}
    {{- end }}
  {{- end }}
{{- end }}

{{/* Ingress to the metrics port, from metrics.scrapers only. */}}
{{- define "gymsandbox.metricsIngress" -}}
- from:
    {{- toYaml .Values.metrics.scrapers | nindent 4 }}
  ports:
    - {protocol: TCP, port: {{ .Values.metrics.port }}}
{{- end }}
