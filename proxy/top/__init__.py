"""`kafka-quota-proxy top`'s wing: what it reads (feed.py: the usage samples topic, the quota
store topic and the fleet's bus, as any Kafka client), what it ranks (view.py: pure, on the
samples and quotas given), how a row is worded (text.py: pure) and the full screen
(screen.py: the only importer of Textual, the `top` extra). proxy/cli/top.py is its command.
"""
