#!/bin/sh
# What docker-compose.yml's health check runs in apache/kafka's image.
exec java -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
  -Dlog4j2.configurationFile=/opt/kafka/config/log4j2.properties -cp '/opt/kafka/libs/*' \
  org.apache.kafka.tools.BrokerApiVersionsCommand "$@"
