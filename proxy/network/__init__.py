"""The asyncio shell: listeners, connections, the server and worker processes."""
