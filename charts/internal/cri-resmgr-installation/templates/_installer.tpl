{{/* The installer DaemonSet; dict: root (the chart's context), name, mode, scheduling (YAML), cleanup. */}}
{{- define "cri-resmgr.installer" -}}
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: {{ .name }}
  namespace: kube-system
  labels:
    app.kubernetes.io/name: {{ .name }}
    # gardener-resource-manager's node controller keeps a new node tainted
    # (node.gardener.cloud/critical-components-not-ready) until the pods of every DaemonSet labelled so
    # are scheduled and ready there (gardener v1.149.3 pkg/resourcemanager/controller/node/criticalcomponents).
    # The installer is ready once the node is usable: on the relay, or on containerd after a failed
    # install or a fallback (degraded, said in the node record and the Extension's health).
    node.gardener.cloud/critical-component: "true"
{{ include "cri-resmgr.labels" .root | indent 4 }}
spec:
  selector:
    matchLabels:
      app.kubernetes.io/name: {{ .name }}
  updateStrategy:
    type: RollingUpdate
    rollingUpdate:
      # Install rolls one node at a time: a bad release stops at the first node whose installer is not
      # ready. Uninstall (disable, or nodes outside the selection) rolls installer.uninstallMaxUnavailable
      # nodes at once; README "How a node stays safe" has the calculation behind the default.
      maxUnavailable: {{ if eq .mode "uninstall" }}{{ .root.Values.installer.uninstallMaxUnavailable | default "50%" | toJson }}{{ else }}1{{ end }}
  template:
    metadata:
      labels:
        app.kubernetes.io/name: {{ .name }}
        gardener.cloud/role: system-component
        node.gardener.cloud/critical-component: "true"
{{ include "cri-resmgr.labels" .root | indent 8 }}
      annotations:
        # Static configs are files on the node: a change rolls the installer.
        checksum/static-configs: {{ toJson .root.Values.configs.static | sha256sum }}
    spec:
      serviceAccountName: cri-resmgr-installer
      # Its pod-bound token names the node, which the node-record policy checks.
      automountServiceAccountToken: true
      priorityClassName: {{ .root.Values.installer.priorityClassName }}
      hostPID: true
      # cri-resmgr serves metrics on the host network; the metrics Service
      # reaches it through these pods.
      hostNetwork: true
      dnsPolicy: ClusterFirstWithHostNet
      # Uninstall never runs on SIGTERM, so termination is quick.
      terminationGracePeriodSeconds: 30
{{ .scheduling | indent 6 }}
      containers:
      - name: installer
        image: {{ .root.Values.images.installer }}
        imagePullPolicy: IfNotPresent
        command:
        - cri-resmgr-installer
        - --host-root=/var/host
        - --config-dir=/etc/cri-resmgr-installer/config
        env:
        - name: CRI_RESMGR_INSTALLER_MODE
          value: {{ .mode | quote }}
        - name: NODE_NAME
          valueFrom:
            fieldRef:
              fieldPath: spec.nodeName
        # Written into the node record; the extension counts only records of the rollout it expects.
        - name: CRI_RESMGR_INSTALLER_DIGEST
          value: {{ .root.Values.installer.digest | default "" | quote }}
        securityContext:
          privileged: true
        resources:
{{ toYaml .root.Values.installer.resources | indent 10 }}
        readinessProbe:
          exec:
            command:
            - cri-resmgr-installer-probe
          initialDelaySeconds: 2
          periodSeconds: 5
          timeoutSeconds: 5
          failureThreshold: 2
        {{- if and (not .cleanup) (ne .mode "nri") }}
        ports:
        - name: metrics
          containerPort: {{ .root.Values.metrics.port }}
          protocol: TCP
        {{- end }}
        volumeMounts:
        - name: host-root
          mountPath: /var/host
          mountPropagation: HostToContainer
        - name: config
          mountPath: /etc/cri-resmgr-installer/config
          readOnly: true
        - name: ready
          mountPath: /var/run/cri-resmgr-installer
      volumes:
      - name: host-root
        hostPath:
          path: /
          type: Directory
      - name: config
        configMap:
          name: cri-resmgr-installer-config
          optional: true
      - name: ready
        emptyDir: {}
{{- end -}}
