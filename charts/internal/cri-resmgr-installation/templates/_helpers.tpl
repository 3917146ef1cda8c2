{{- define "cri-resmgr.labels" -}}
app.kubernetes.io/part-of: cri-resmgr
app.kubernetes.io/managed-by: gardener-extension-cri-resmgr
{{- end -}}

{{- define "cri-resmgr.nodeSelector" -}}
{{- toYaml (merge (dict) .Values.nodeSelector .Values.baseNodeSelector) -}}
{{- end -}}

{{/* Containerd nodes that the selection (nodeSelector, workerPools) leaves out: the terms are ORed. */}}
{{- define "cri-resmgr.outsideSelection" -}}
nodeSelector:
{{ toYaml .Values.baseNodeSelector | indent 2 }}
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
      {{- range $key, $value := .Values.nodeSelector }}
      - matchExpressions:
        - key: {{ $key | quote }}
          operator: NotIn
          values: [{{ $value | quote }}]
      {{- end }}
      {{- if .Values.workerPools }}
      - matchExpressions:
        - key: worker.gardener.cloud/pool
          operator: NotIn
          values:
{{ toYaml .Values.workerPools | indent 10 }}
      {{- end }}
tolerations:
- effect: NoSchedule
  operator: Exists
- effect: NoExecute
  operator: Exists
{{- end -}}

{{- define "cri-resmgr.scheduling" -}}
nodeSelector:
{{ include "cri-resmgr.nodeSelector" . | indent 2 }}
{{- if .Values.workerPools }}
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
      - matchExpressions:
        - key: worker.gardener.cloud/pool
          operator: In
          values:
{{ toYaml .Values.workerPools | indent 10 }}
{{- end }}
# Node-level components run everywhere the runtime runs, whatever the taints.
tolerations:
- effect: NoSchedule
  operator: Exists
- effect: NoExecute
  operator: Exists
{{- end -}}


{{/* Scheduling of the DaemonSets of one mode; dict: root, poolOperator ("" | In | NotIn), pools, nodeSelector
     (extra labels). The nodes the selection (nodeSelector, workerPools) picks, narrowed to the worker pools of
     that mode (providerConfig mode/modes; extension/installation.py pool_constraint). */}}
{{- define "cri-resmgr.schedulingFor" -}}
{{- $root := .root -}}
nodeSelector:
{{ toYaml (merge (dict) (.nodeSelector | default (dict)) $root.Values.nodeSelector $root.Values.baseNodeSelector) | indent 2 }}
{{- if or $root.Values.workerPools .poolOperator }}
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
      - matchExpressions:
        {{- if $root.Values.workerPools }}
        - key: worker.gardener.cloud/pool
          operator: In
          values:
{{ toYaml $root.Values.workerPools | indent 10 }}
        {{- end }}
        {{- if .poolOperator }}
        - key: worker.gardener.cloud/pool
          operator: {{ .poolOperator }}
          values:
{{ toYaml .pools | indent 10 }}
        {{- end }}
{{- end }}
# Node-level components run everywhere the runtime runs, whatever the taints.
tolerations:
- effect: NoSchedule
  operator: Exists
- effect: NoExecute
  operator: Exists
{{- end -}}
