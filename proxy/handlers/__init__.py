"""One handler per Kafka API family: what the proxy does with a request and with its response.

The connection knows no API. It reads a request's header, asks the registry for the api_key's
handler, and carries out the outcome the handler returns (forward, possibly rewritten, with
opaque per-request state kept for the response; or answer here); when the response comes it
hands it to the same handler, then settles the throttle once for every API. Handlers are
sans-IO: a request and the time in, an outcome out; unit tests call them directly.
"""
