{{/* Names and labels shared by every object of the release. */}}

{{- define "chamber.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "chamber.controller" -}}{{ include "chamber.fullname" . }}-controller{{- end -}}
{{- define "chamber.agent" -}}{{ include "chamber.fullname" . }}-agent{{- end -}}

{{- define "chamber.labels" -}}
app.kubernetes.io/name: chamber
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* chamber.selector: the labels a component's pods are selected by; pass (list $ "controller"). */}}
{{- define "chamber.selector" -}}
app.kubernetes.io/name: chamber
app.kubernetes.io/instance: {{ (index . 0).Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "chamber.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* chamber.flags: a flags map as container args, sorted, --name=value; pass
(list "controller" .Values.controller.flags "flag" ...), the flags the chart sets itself last. */}}
{{- define "chamber.flags" -}}
{{- $component := index . 0 -}}{{- $flags := index . 1 -}}
{{- range $reserved := slice . 2 }}
{{- if hasKey $flags $reserved }}
{{- fail (printf "%s.flags.%s: the chart sets --%s itself; remove it from the values" $component $reserved $reserved) }}
{{- end }}
{{- end }}
{{- range $name, $value := $flags }}
- {{ printf "--%s=%v" $name $value | quote }}
{{- end }}
{{- end -}}

{{/* chamber.monitoring: whether a Prometheus-operator object is rendered; pass (list $ .enabled). */}}
{{- define "chamber.monitoring" -}}
{{- $root := index . 0 -}}{{- $enabled := index . 1 -}}
{{- if or (eq (toString $enabled) "true") (and (eq (toString $enabled) "auto") ($root.Capabilities.APIVersions.Has "monitoring.coreos.com/v1")) -}}
true
{{- end -}}
{{- end -}}

{{- /* Whether pods get their team's eviction grace (the flag pod-grace-from-eviction-policy, on unless set false), and the name of the policy that gives it (pod-grace-policy.yaml). */ -}}
{{- define "chamber.podGrace" -}}{{ ne (toString (index .Values.controller.flags "pod-grace-from-eviction-policy")) "false" }}{{- end -}}
{{- define "chamber.podGracePolicy" -}}{{ include "chamber.fullname" . }}-pod-grace{{- end -}}
