"""The proxy's one config file: loading, validation that names file/entity/key, reload.

One module per TOML section ([proxy] in proxy.py, [listener] and [upstream] in tls.py,
[cluster] in cluster.py, the quota sections in quotas.py, ...); loader.py reads the file and
hands each section to its parser; values.py holds what the parsers share.
"""
