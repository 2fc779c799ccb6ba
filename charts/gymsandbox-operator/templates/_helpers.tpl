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
{{- $tls := .Values.broker.tls -}}
{{- $broker := dict
    "namespace" .Release.Namespace
    "podSelector" (include "gymsandbox.brokerSelector" . | fromYaml)
    "port" (int .Values.broker.port)
    "url" (printf "%s://%s.%s.svc:%d" (ternary "https" "http" $tls.enabled) (include "gymsandbox.brokerName" .) .Release.Namespace (int .Values.broker.port)) -}}
{{- if and $tls.enabled (not $tls.secretName) -}}
{{- $_ := set $broker "caBundle" (include "gymsandbox.brokerTLS" . | fromYaml).ca -}}
{{- else if and $tls.enabled $tls.caBundle -}}
{{- $_ := set $broker "caBundle" $tls.caBundle -}}
{{- end -}}
{{- $_ := set $policy "broker" $broker -}}
{{- toYaml $policy -}}
{{- end }}

{{/* The broker's TLS Secret when the chart makes it. */}}
{{- define "gymsandbox.brokerTLSSecretName" -}}{{ printf "%s-tls" (include "gymsandbox.brokerName" .) | trunc 63 | trimSuffix "-" }}{{- end }}

{{/*
The broker's certificate when the chart makes it (broker.tls.enabled without secretName): the Secret's own on
an upgrade (lookup), else a new CA (ten years) and a certificate for the broker Service's names. Made once
per render and kept in .Values, so the Secret and the policy's caBundle always agree.
*/}}
{{- define "gymsandbox.brokerTLS" -}}
{{- if not (hasKey .Values "generatedBrokerTLS") -}}
{{- $service := include "gymsandbox.brokerName" . -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "gymsandbox.brokerTLSSecretName" .) -}}
{{- $tls := dict -}}
{{- if and $existing (hasKey ($existing.data | default dict) "ca.crt") -}}
{{- $tls = dict "crt" (index $existing.data "tls.crt" | b64dec) "key" (index $existing.data "tls.key" | b64dec) "ca" (index $existing.data "ca.crt" | b64dec) -}}
{{- else -}}
{{- $ca := genCA (printf "%s-ca" $service) 3650 -}}
{{- $names := list $service (printf "%s.%s" $service .Release.Namespace) (printf "%s.%s.svc" $service .Release.Namespace) (printf "%s.%s.svc.cluster.local" $service .Release.Namespace) -}}
{{- $cert := genSignedCert (printf "%s.%s.svc" $service .Release.Namespace) nil $names 3650 $ca -}}
{{- $tls = dict "crt" $cert.Cert "key" $cert.Key "ca" $ca.Cert -}}
{{- end -}}
{{- $_ := set .Values "generatedBrokerTLS" $tls -}}
{{- end -}}
{{- toYaml .Values.generatedBrokerTLS -}}
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

{{/* Where a Deployment's pods run: nodeSelector, tolerations, affinity, priorityClassName and
topologySpreadConstraints from the component's values (operator or broker). */}}
{{- define "gymsandbox.podPlacement" -}}
{{- with .priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
