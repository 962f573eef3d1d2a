"""Per-principal quota engine: sensors, entities and throttle decisions (sans-IO)."""
