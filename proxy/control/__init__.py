"""State the proxy keeps in the cluster and the file: its own client, its topics, the fleet
bus, broker discovery and config reload."""
