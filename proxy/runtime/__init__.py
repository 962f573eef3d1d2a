"""The sans-IO per-connection runtime: the connection core and the state it asks (the
in-flight queue, the read gate, the round trips), its context and its budgets.

Nothing here imports asyncio, a socket or a Kafka client (make lint checks it), so the fidelity
tests drive it on a virtual clock."""
