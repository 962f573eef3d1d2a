"""What the proxy shows of itself: Prometheus metrics, usage sinks and log limiting."""
