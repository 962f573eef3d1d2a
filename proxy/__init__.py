"""The I/O shell: listeners, connections, principals, metrics and the command line."""
