{{/*
Helpers of Paladin's chart. Every object carries app.kubernetes.io/part-of: paladin (as the
kustomization's `labels` gives deploy/k8s's objects) and .Values.commonLabels.
*/}}

{{/* metadata: of (dict "ctx" $ "name" NAME "namespaced" BOOL); the namespace is the release's. */}}
{{- define "paladin.metadata" -}}
metadata:
  name: {{ .name }}
  {{- if .namespaced }}
  namespace: {{ .ctx.Release.Namespace }}
  {{- end }}
  labels:
    {{- toYaml (merge (dict "app.kubernetes.io/part-of" "paladin") .ctx.Values.commonLabels) | nindent 4 }}
{{- end }}

{{- define "paladin.image" -}}
{{- $repo := required "image.repository: the image of Paladin's components (deploy/k8s/image.sh)" .Values.image.repository -}}
{{- printf "%s:%v" $repo (required "image.tag: the image's tag" .Values.image.tag) -}}
{{- end }}

{{/* The API server's user name of Paladin's scheduler (its ServiceAccount). */}}
{{- define "paladin.schedulerUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:paladin-scheduler
{{- end }}

{{/* The API server's user name of the node component (its ServiceAccount). */}}
{{- define "paladin.nodeUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:paladin-node
{{- end }}

{{- define "paladin.moverUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:paladin-mover
{{- end }}

{{/* Where the scheduler and the webhook reach Paladin's server: server.url, else its Service. */}}
{{- define "paladin.serverURL" -}}
{{- .Values.server.url | default (printf "https://paladin-server.%s.svc:%v" .Release.Namespace .Values.server.port) -}}
{{- end }}

{{/* The arguments, volume mounts and volumes of a component that reaches Paladin's server with
its admin token (the Secret paladin-server-token), trusting the CA of its certificate (ca.crt of
the Secret paladin-server-tls): of (dict "ctx" $ "part" "args"|"mount"|"volume"). */}}
{{- define "paladin.serverClient" -}}
{{- if eq .part "args" }}
- --paladin-server
- {{ include "paladin.serverURL" .ctx | quote }}
- --paladin-token-file
- /var/run/paladin/server-token/token
- --paladin-ca-file
- /var/run/paladin/server-ca/ca.crt
{{- else if eq .part "mount" }}
- {name: server-token, mountPath: /var/run/paladin/server-token, readOnly: true}
- {name: server-ca, mountPath: /var/run/paladin/server-ca, readOnly: true}
{{- else }}
- name: server-token
  secret: {secretName: paladin-server-token, defaultMode: 0400}
- name: server-ca
  secret: {secretName: paladin-server-tls, items: [{key: ca.crt, path: ca.crt}]}
{{- end }}
{{- end }}

{{/* The GPU nodes' label as a nodeSelector's one entry. */}}
{{- define "paladin.gpuNodeSelector" -}}
{{ required "gpuNodeLabel.key: the label of GPU nodes" .Values.gpuNodeLabel.key }}: {{ .Values.gpuNodeLabel.value | quote }}
{{- end }}

{{/* A container's securityContext: no privilege escalation, a read-only root; dropCaps too. */}}
{{- define "paladin.securityContext" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  {{- if .dropCaps }}
  capabilities: {drop: [ALL]}
  {{- end }}
{{- end }}

{{/* The node's runc, CRIU, runc state and image folder as arguments of `paladin k8s checkpoint`
or `recover` (in the node's mount namespace: the node's paths): of (dict "ctx" $ "part" VALUES),
VALUES' runcRoot and images in place of nodeRuntime's where set; with emulated GPUs, the emulated
driver of the node's library folder. */}}
{{- define "paladin.nodeRuntimeArgs" -}}
{{- $n := .ctx.Values.nodeRuntime -}}
- --images
- {{ .part.images | default $n.images | quote }}
- --runc
- {{ $n.runc | quote }}
- --runc-root
- {{ .part.runcRoot | default $n.runcRoot | quote }}
- --criu-dir
- {{ $n.criuDir | quote }}
{{- if .ctx.Values.emulatedGPUs.enabled }}
- --driver
- {{ printf "%s/libpaladin-emucuda.so" .ctx.Values.hostPaths.lib | quote }}
- --nvml
- {{ printf "%s/libpaladin-emucuda.so" .ctx.Values.hostPaths.lib | quote }}
{{- end }}
{{- end }}

{{/* Their environment: the node's name, a PATH for the node's programs; emulated GPUs' state. */}}
{{- define "paladin.nodeRuntimeEnv" -}}
- name: NODE_NAME
  valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
# Where the node's runc and programs are found once in its mount namespace.
- {name: PATH, value: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
{{- if .Values.emulatedGPUs.enabled }}
- {name: PALADIN_EMU_GPUS, value: {{ .Values.emulatedGPUs.gpus | quote }}}
- {name: PALADIN_EMU_STATE, value: {{ printf "%s/state" .Values.hostPaths.emu | quote }}}
{{- end }}
{{- end }}
