{{- define "loadline.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "loadline.labels" -}}
app.kubernetes.io/part-of: loadline
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{- define "loadline.selector" -}}
app.kubernetes.io/part-of: loadline
app.kubernetes.io/component: {{ . }}
{{- end -}}
