{{/*
One Deployment of the shared image. Arguments (a dict):
  root: $, component: name, args: the `reach` arguments, replicas, resources,
  httpPort: the port serving /healthz (0: none), scheme, sizeLimit, env: extra env entries, mounts/volumes: extra.
*/}}
{{- define "reach.deployment" -}}
{{- $root := .root -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "reach.fullname" $root }}-{{ .component }}
  labels:
    {{- include "reach.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
spec:
  {{- if not .scaledByKeda }}
  replicas: {{ .replicas }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "reach.selector" (dict "root" $root "component" .component) | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "reach.labels" $root | nindent 8 }}
        app.kubernetes.io/component: {{ .component }}
      {{- with $root.Values.podAnnotations }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      {{- include "reach.podCommon" $root | nindent 6 }}
      terminationGracePeriodSeconds: 60
      containers:
        - name: {{ .component }}
          image: {{ include "reach.image" $root | quote }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          args:
            {{- toYaml .args | nindent 12 }}
          env:
            {{- include "reach.env" $root | nindent 12 }}
            {{- if .streamApp }}
            {{- /* a stream app binds its views to the pod's address and advertises it to the other workers */}}
            - name: REACH_WEB_HOST
              valueFrom:
                fieldRef:
                  fieldPath: status.podIP
            {{- else }}
            {{- /* everyone else reads the status views (agents: deliveries older than 29 min) from the status Service */}}
            - name: REACH_WEB_HOST
              value: {{ printf "%s-status" (include "reach.fullname" $root) | quote }}
            {{- end }}
            {{- with .env }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          {{- if .httpPort }}
          ports:
            - name: http
              containerPort: {{ .httpPort }}
              protocol: TCP
          livenessProbe:
            {{- include "reach.probe" (dict "port" "http" "scheme" .scheme "probe" $root.Values.probes.liveness) | nindent 12 }}
          readinessProbe:
            {{- include "reach.probe" (dict "port" "http" "scheme" .scheme "probe" $root.Values.probes.readiness) | nindent 12 }}
          {{- end }}
          resources:
            {{- toYaml .resources | nindent 12 }}
          securityContext:
            {{- toYaml $root.Values.securityContext | nindent 12 }}
          volumeMounts:
            {{- include "reach.volumeMounts" $root | nindent 12 }}
            {{- with .mounts }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
      volumes:
        {{- include "reach.volumes" (dict "root" $root "sizeLimit" .sizeLimit) | nindent 8 }}
        {{- with .volumes }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
{{- end -}}

{{/* A PodDisruptionBudget: (dict "root" $ "component" "gateway" "pdb" .Values.gateway.pdb) */}}
{{- define "reach.pdb" -}}
{{- if .pdb.enabled }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "reach.fullname" .root }}-{{ .component }}
  labels:
    {{- include "reach.labels" .root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
spec:
  maxUnavailable: {{ .pdb.maxUnavailable }}
  selector:
    matchLabels:
      {{- include "reach.selector" (dict "root" .root "component" .component) | nindent 6 }}
{{- end }}
{{- end -}}
