#!/bin/sh
# apache/kafka's convention: KAFKA_FOO_BAR=v is foo.bar=v in server.properties ("___" is "-",
# "__" is "_"); the variables its image reads for the JVM and logging are not properties
# (KAFKA_OPTS and KAFKA_JVM_PERFORMANCE_OPTS reach java). The storage is formatted once.
set -eu
props=/opt/kafka/config/server.properties
: > "$props"
env | while IFS='=' read -r name value; do
  case "$name" in
    KAFKA_HEAP_OPTS|KAFKA_OPTS|KAFKA_JVM_PERFORMANCE_OPTS|KAFKA_LOG4J_OPTS|KAFKA_VERSION) ;;
    KAFKA_JMX_OPTS|KAFKA_GC_LOG_OPTS|KAFKA_LOG4J_ROOT_LOGLEVEL|KAFKA_LOG4J_LOGGERS) ;;
    KAFKA_TOOLS_LOG4J_LOGLEVEL) ;;
    KAFKA_*)
      key=$(printf '%s' "${name#KAFKA_}" | sed -e 's/___/-/g' -e 's/__/@/g' -e 's/_/./g' -e 's/@/_/g' | tr 'A-Z' 'a-z')
      printf '%s=%s\n' "$key" "$value" >> "$props" ;;
  esac
done
grep -q '^log\.dirs=' "$props" || echo "log.dirs=/var/lib/kafka/data" >> "$props"
java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
  -Dlog4j2.configurationFile=/opt/kafka/config/log4j2.properties -cp '/opt/kafka/libs/*' \
  kafka.tools.StorageTool format --cluster-id "${CLUSTER_ID:-5L6g3nShT-eMCtK--X86sw}" \
  -c "$props" --ignore-formatted
# shellcheck disable=SC2086 # the options are word lists, as Kafka's own scripts take them
exec java ${KAFKA_HEAP_OPTS:--Xmx512m} ${KAFKA_JVM_PERFORMANCE_OPTS:--XX:+UseG1GC} ${KAFKA_OPTS:-} \
  -Dlog4j2.configurationFile=/opt/kafka/config/log4j2.properties -cp '/opt/kafka/libs/*' \
  kafka.Kafka "$props"
