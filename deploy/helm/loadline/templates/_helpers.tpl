{{- define "loadline.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "loadline.labels" -}}
app.kubernetes.io/part-of: loadline
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{- /* A component's HTTP port (/healthz, /readyz, /metrics): `port`, or `metricsPort`, the agent's and the
manager's old name for it, while a values file still sets that (deprecated: NOTES.txt says so). */ -}}
{{- define "loadline.port" -}}
{{- .metricsPort | default .port -}}
{{- end -}}

{{- define "loadline.selector" -}}
app.kubernetes.io/part-of: loadline
app.kubernetes.io/component: {{ . }}
{{- end -}}

{{- /* clientConfig of one of the manager's webhooks: the Service, or manager.webhook.url; args: w, ns, path */ -}}
{{- define "loadline.webhookClient" -}}
{{- if .w.url }}
url: {{ printf "%s%s" (trimSuffix "/" .w.url) .path }}
{{- else }}
service: {name: loadline-webhook, namespace: {{ .ns }}, path: {{ .path }}, port: 443}
{{- end }}
{{- end }}
