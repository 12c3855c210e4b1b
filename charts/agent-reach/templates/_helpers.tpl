{{/* Names and labels. */}}
{{- define "reach.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}{{ .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else -}}{{ printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" }}{{- end -}}
{{- end -}}

{{- define "reach.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "reach.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one component: (dict "root" $ "component" "gateway"). */}}
{{- define "reach.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The settings every process reads (reach/settings.py): broker, namespace, Redis, security. */}}
{{- define "reach.env" -}}
- name: REACH_NAMESPACE
  value: {{ .Values.namespace | quote }}
- name: REACH_BOOTSTRAP
  value: {{ .Values.kafka.bootstrap | quote }}
- name: REACH_HOME
  value: /var/lib/reach
- name: REACH_TOPICS_FILE
  value: /app/topics.yaml
- name: REACH_SECURITY_PROTOCOL
  value: {{ .Values.kafka.securityProtocol | quote }}
{{- if hasPrefix "SASL" .Values.kafka.securityProtocol }}
- name: REACH_SASL_MECHANISM
  value: {{ required "kafka.sasl.mechanism is required with a SASL securityProtocol" .Values.kafka.sasl.mechanism | quote }}
- name: REACH_SASL_USERNAME
  valueFrom:
    secretKeyRef:
      name: {{ required "kafka.sasl.existingSecret is required with a SASL securityProtocol" .Values.kafka.sasl.existingSecret }}
      key: {{ .Values.kafka.sasl.usernameKey }}
- name: REACH_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .Values.kafka.sasl.existingSecret }}
      key: {{ .Values.kafka.sasl.passwordKey }}
{{- end }}
{{- if .Values.kafka.tls.existingSecret }}
- name: REACH_SSL_CA_FILE
  value: /etc/reach/kafka-tls/{{ .Values.kafka.tls.caKey }}
- name: REACH_SSL_CHECK_HOSTNAME
  value: {{ .Values.kafka.tls.checkHostname | quote }}
{{- if .Values.kafka.tls.certKey }}
- name: REACH_SSL_CERT_FILE
  value: /etc/reach/kafka-tls/{{ .Values.kafka.tls.certKey }}
- name: REACH_SSL_KEY_FILE
  value: /etc/reach/kafka-tls/{{ required "kafka.tls.keyKey is required with kafka.tls.certKey" .Values.kafka.tls.keyKey }}
{{- end }}
{{- if .Values.kafka.tls.keyPasswordKey }}
- name: REACH_SSL_KEY_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .Values.kafka.tls.existingSecret }}
      key: {{ .Values.kafka.tls.keyPasswordKey }}
{{- end }}
{{- end }}
{{- if .Values.redis.existingSecret }}
- name: REACH_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.redis.existingSecret }}
      key: {{ .Values.redis.urlKey }}
{{- else }}
- name: REACH_REDIS_URL
  value: {{ required "redis.url or redis.existingSecret is required" .Values.redis.url | quote }}
{{- end }}
{{- if .Values.redis.caSecret }}
- name: REACH_REDIS_CA_FILE
  value: /etc/reach/redis-tls/{{ .Values.redis.caKey }}
{{- end }}
- name: REACH_WEB_PORT
  value: {{ .Values.web.port | quote }}
- name: REACH_WEB_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ required "web.tokenSecret is required (the stream app's views bind beyond loopback)" .Values.web.tokenSecret }}
      key: {{ .Values.web.tokenKey }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "reach.volumeMounts" -}}
- name: home
  mountPath: /var/lib/reach
- name: tmp
  mountPath: /tmp
{{- if .Values.kafka.tls.existingSecret }}
- name: kafka-tls
  mountPath: /etc/reach/kafka-tls
  readOnly: true
{{- end }}
{{- if .Values.redis.caSecret }}
- name: redis-tls
  mountPath: /etc/reach/redis-tls
  readOnly: true
{{- end }}
{{- end -}}

{{/* (dict "root" $ "sizeLimit" "4Gi") */}}
{{- define "reach.volumes" -}}
- name: home
  emptyDir:
    sizeLimit: {{ .sizeLimit | default "1Gi" }}
- name: tmp
  emptyDir:
    sizeLimit: 256Mi
{{- if .root.Values.kafka.tls.existingSecret }}
- name: kafka-tls
  secret:
    secretName: {{ .root.Values.kafka.tls.existingSecret }}
    defaultMode: 0440
{{- end }}
{{- if .root.Values.redis.caSecret }}
- name: redis-tls
  secret:
    secretName: {{ .root.Values.redis.caSecret }}
    defaultMode: 0440
{{- end }}
{{- end -}}

{{/* Pod-level settings shared by every Deployment. */}}
{{- define "reach.podCommon" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
{{ toYaml . }}
{{- end }}
securityContext:
{{ toYaml .Values.podSecurityContext | indent 2 }}
{{- with .Values.nodeSelector }}
nodeSelector:
{{ toYaml . | indent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
{{ toYaml . | indent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
{{ toYaml . | indent 2 }}
{{- end }}
{{- end -}}

{{/* An HTTP probe on /healthz: (dict "port" "http" "probe" .Values.probes.liveness "scheme" "HTTP") */}}
{{- define "reach.probe" -}}
httpGet:
  path: /healthz
  port: {{ .port }}
  scheme: {{ .scheme | default "HTTP" }}
{{ toYaml .probe }}
{{- end -}}
