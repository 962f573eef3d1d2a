"""The proxy's pure parts driven in-process, without sockets or sleeps, for the unit tests
and the in-process benches alike: a virtual clock and recording transports around the real
connection core (harness.py), frames as clients and brokers send them (wire.py), and usage
samples as proxies write them (samples.py)."""
