"""A local Apache Kafka for tests, benchmarks and `make run`.

The project brings its own broker: the pom beside this file pins one Kafka 4.x release, Maven
copies its jars into a git-ignored cache (jars.py), and cluster.py formats KRaft storage and
runs 1..N combined broker+controller nodes with Java 17 on free loopback ports (ports.py).
Kafka's CLI tools run from the same classpath, so tests and benchmarks measure the exact
release the proxy fronts; broker_queries.py asks a running broker what it serves.
"""
