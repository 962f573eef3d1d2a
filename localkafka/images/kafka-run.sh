#!/bin/sh
# apache/kafka's convention: KAFKA_FOO_BAR=v is foo.bar=v in server.properties ("___" is "-",
# "__" is "_"); the JVM's own variables are not properties. The storage is formatted once.
set -eu
props=/opt/kafka/config/server.properties
: > "$props"
env | while IFS='=' read -r name value; do
  case "$name" in
    KAFKA_HEAP_OPTS|KAFKA_OPTS|KAFKA_JVM_PERFORMANCE_OPTS|KAFKA_LOG4J_OPTS) ;;
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
exec java ${KAFKA_HEAP_OPTS:--Xmx512m} -XX:+UseG1GC \
  -Dlog4j2.configurationFile=/opt/kafka/config/log4j2.properties -cp '/opt/kafka/libs/*' \
  kafka.Kafka "$props"
