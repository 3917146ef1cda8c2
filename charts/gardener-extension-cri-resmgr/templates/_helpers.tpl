{{- define "extension.name" -}}gardener-extension-cri-resmgr{{- end -}}

{{- define "extension.labels" -}}
app.kubernetes.io/name: {{ include "extension.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
