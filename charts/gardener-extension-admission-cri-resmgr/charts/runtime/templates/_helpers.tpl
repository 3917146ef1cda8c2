{{- define "admission.name" -}}gardener-extension-admission-cri-resmgr{{- end -}}

{{- define "admission.labels" -}}
app.kubernetes.io/name: {{ include "admission.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
