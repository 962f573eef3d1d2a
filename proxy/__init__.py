"""The proxy: handlers and enforcement on a sans-IO runtime, an asyncio shell around them, the
state it keeps in the cluster, what it shows of itself, one process object and the CLI
(docs/architecture.md)."""
