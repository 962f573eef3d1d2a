"""Entry points: `kafka-quota-proxy run | check-config | quotas | top | report`."""
