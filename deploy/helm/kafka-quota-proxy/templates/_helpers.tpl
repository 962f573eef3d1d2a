{{/* The release's name for everything it makes, 63 characters at most. */}}
{{- define "kqp.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kqp.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kqp.labels" -}}
{{ include "kqp.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* TLS towards clients or brokers: whether the protocol is one of the SSL ones. */}}
{{- define "kqp.tls" -}}
{{- if has . (list "SSL" "SASL_SSL") }}true{{ end -}}
{{- end -}}

{{- define "kqp.advertisedHost" -}}
{{- .Values.advertisedHost | default (printf "%s.%s.svc.cluster.local" (include "kqp.fullname" .) .Release.Namespace) -}}
{{- end -}}

{{/* A TOML basic string: JSON's escapes are TOML's, and <, > and & are kept as they are
     (toJson writes them as \u escapes, which TOML reads alike but people do not). */}}
{{- define "kqp.string" -}}
{{- . | toJson | replace "\\u003c" "<" | replace "\\u003e" ">" | replace "\\u0026" "&" -}}
{{- end -}}

{{/* One quota entity's table: its keys, then its nested client tables (users only).
     Strings go through toJson: JSON's escapes are TOML's. */}}
{{- define "kqp.quotaTable" -}}
{{- $path := index . 0 -}}
{{- $values := index . 1 -}}
[{{ $path }}]
{{- range $key, $value := $values }}
{{- if ne $key "clients" }}
{{ $key }} = {{ $value | toJson }}
{{- end }}
{{- end }}
{{- range $client, $nested := ($values.clients | default dict) }}

[{{ $path }}.clients.{{ include "kqp.string" $client }}]
{{- range $key, $value := $nested }}
{{ $key }} = {{ $value | toJson }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The proxy's config file: the values' sections, then extraConfig's, none of them twice
     (TOML refuses a table declared twice, and the pod would crash-loop on it). */}}
{{- define "kqp.config" -}}
{{- $rendered := include "kqp.renderedSections" . -}}
{{- $rendered }}
{{- with .Values.extraConfig }}
{{- range $line := regexFindAll `(?m)^[ \t]*\[[^\[\]]+\]` . -1 }}
{{- $header := regexFind `\[[^\[\]]+\]` $line }}
{{- if regexMatch (printf `(?m)^%s` (regexQuoteMeta $header)) $rendered }}
{{- fail (printf "extraConfig: %s is already rendered from the chart's values; set its keys through them (values.yaml), not in extraConfig" $header) }}
{{- end }}
{{- end }}

{{ . }}
{{- end }}
{{- end -}}

{{/* The sections the chart renders from its values. */}}
{{- define "kqp.renderedSections" -}}
{{- $tlsUpstream := include "kqp.tls" .Values.cluster.securityProtocol -}}
{{- $tlsListener := include "kqp.tls" .Values.listener.securityProtocol -}}
# Rendered by the kafka-quota-proxy chart from its values (docs/configuration.md).
[proxy]
upstream_bootstrap_servers = {{ .Values.cluster.bootstrapServers | toJson }}
listen_host = "0.0.0.0"
advertised_host = {{ include "kqp.advertisedHost" . | toJson }}
bootstrap_port = {{ .Values.ports.bootstrap | toJson }}
broker_port_base = {{ .Values.ports.brokerBase | toJson }}
workers = {{ .Values.workers | toJson }}
routing = {{ .Values.routing | toJson }}
drain_delay_s = {{ .Values.drain.delaySeconds | toJson }}
drain_timeout_s = {{ .Values.drain.timeoutSeconds | toJson }}
{{- range $key, $value := .Values.proxyExtra }}
{{ $key }} = {{ $value | toJson }}
{{- end }}
{{- if eq .Values.routing "sni" }}

[sni]
bootstrap_host = {{ .Values.sni.bootstrapHost | toJson }}
broker_host = {{ .Values.sni.brokerHost | toJson }}
advertised_port = {{ .Values.sni.advertisedPort | toJson }}
{{- end }}

[metrics]
listen_host = "0.0.0.0"
port = {{ .Values.ports.metrics | toJson }}

[usage]
# samples for `kafka-quota-proxy report`: the pod's emptyDir, or the claim usage.existingClaim
directory = "/var/lib/kafka-quota-proxy/usage"
{{- with .Values.usage.kafkaTopic }}
# and a topic of the cluster, which `top` and `report` read from anywhere
kafka_topic = {{ . | toJson }}
{{- end }}
{{- if ne .Values.listener.securityProtocol "PLAINTEXT" }}

[listener]
security.protocol = {{ .Values.listener.securityProtocol | toJson }}
{{- if $tlsListener }}
ssl.keystore.type = "PEM"
ssl.keystore.location = "/etc/kafka-quota-proxy/listener/{{ .Values.listener.tls.keystoreKey }}"
{{- if ne .Values.listener.tls.clientAuth "none" }}
{{- if not .Values.listener.tls.acknowledgeBrokerSeesProxy }}
{{- fail "listener.tls.clientAuth: the brokers see the proxy's certificate, not the client's, so certificate ACLs on the brokers no longer tell clients apart; set listener.tls.acknowledgeBrokerSeesProxy=true to run so (docs/principals-and-tls.md)" }}
{{- end }}
ssl.client.auth = {{ .Values.listener.tls.clientAuth | toJson }}
acknowledge.broker.sees.proxy = true
ssl.truststore.type = "PEM"
ssl.truststore.location = "/etc/kafka-quota-proxy/listener/{{ .Values.listener.tls.truststoreKey }}"
{{- end }}
{{- end }}
{{- end }}
{{- if ne .Values.cluster.securityProtocol "PLAINTEXT" }}

[upstream]
security.protocol = {{ .Values.cluster.securityProtocol | toJson }}
{{- if $tlsUpstream }}
{{- if .Values.cluster.tls.existingSecret }}
ssl.truststore.type = "PEM"
ssl.truststore.location = "/etc/kafka-quota-proxy/cluster/{{ .Values.cluster.tls.caKey }}"
{{- end }}
{{- if not .Values.cluster.tls.verifyHostname }}
ssl.endpoint.identification.algorithm = ""
{{- end }}
{{- end }}

[cluster]
security.protocol = {{ .Values.cluster.securityProtocol | toJson }}
{{- if .Values.cluster.sasl.mechanism }}
sasl.mechanism = {{ .Values.cluster.sasl.mechanism | toJson }}
sasl.username = {{ .Values.cluster.sasl.username | toJson }}
# the Secret named in the values, mounted as files: read at each connection, so a rotated
# password is taken without a restart
sasl.password = "${directory:/etc/kafka-quota-proxy/cluster-credentials:{{ .Values.cluster.sasl.passwordKey }}}"
{{- end }}
{{- if and $tlsUpstream .Values.cluster.tls.existingSecret }}
ssl.truststore.type = "PEM"
ssl.truststore.location = "/etc/kafka-quota-proxy/cluster/{{ .Values.cluster.tls.caKey }}"
{{- end }}
{{- if and $tlsUpstream (not .Values.cluster.tls.verifyHostname) }}
ssl.endpoint.identification.algorithm = ""
{{- end }}
{{- end }}
{{- if .Values.quotaStore.enabled }}

[quota_store]
topic = {{ .Values.quotaStore.topic | toJson }}
{{- end }}
{{- if .Values.fleet.enabled }}

[fleet]
name = {{ .Values.fleet.name | default (include "kqp.fullname" .) | toJson }}
{{- end }}
{{- if .Values.shadow }}

[enforcement]
shadow = {{ .Values.shadow | toJson }}
{{- end }}
{{- range $type := list "users" "clients" "ips" "topics" "brokers" }}
{{- range $name, $values := (index $.Values.quotas $type) }}

{{ include "kqp.quotaTable" (list (printf "%s.%s" $type (include "kqp.string" $name)) $values) }}
{{- end }}
{{- end }}
{{- end -}}

{{/* cluster.brokerIds with each "FIRST-LAST" range spelled out: the ids a Service port is
     opened for, as a list of integers. */}}
{{- define "kqp.brokerIds" -}}
{{- $ids := list -}}
{{- range .Values.cluster.brokerIds -}}
{{- if kindIs "string" . -}}
{{- $bounds := splitList "-" . -}}
{{- $first := int (first $bounds) -}}
{{- $last := int (last $bounds) -}}
{{- if lt $last $first -}}
{{- fail (printf "cluster.brokerIds: %q runs backwards; write FIRST-LAST" .) -}}
{{- end -}}
{{- range $offset := until (int (add1 (sub $last $first))) -}}
{{- $ids = append $ids (int (add $first $offset)) -}}
{{- end -}}
{{- else -}}
{{- $ids = append $ids (int .) -}}
{{- end -}}
{{- end -}}
{{- $ids = $ids | uniq -}}
{{- if gt (len $ids) 200 -}}
{{- fail (printf "cluster.brokerIds: %d ids, a Service port each; at most 200" (len $ids)) -}}
{{- end -}}
{{- range $ids -}}
{{- if gt (add $.Values.ports.brokerBase .) 65535 -}}
{{- fail (printf "cluster.brokerIds: broker %d would be served at port %d, above 65535" . (add $.Values.ports.brokerBase .)) -}}
{{- end -}}
{{- end -}}
{{- toJson $ids -}}
{{- end -}}
