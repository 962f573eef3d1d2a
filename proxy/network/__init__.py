"""The asyncio shell: the server (accept, serve, close, drain), admission (who is served, as
whom, towards which upstream), the endpoints and their listeners, connections, and worker
processes."""
