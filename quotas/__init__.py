"""Kafka's quota arithmetic: sensors, entities and throttle decisions (sans-IO)."""
