"""Sans-IO Kafka wire protocol: framing, headers and the few bodies the proxy acts on.

Nothing here touches a socket or a clock. Frames are handled as whole wire frames (the 4-byte
size prefix included) so that unchanged frames are forwarded as the original bytes.
"""
