"""Errors raised for bytes that are not valid Kafka protocol."""


class ProtocolError(ValueError):
    """The peer sent something that cannot be Kafka protocol; its connection must close."""


class FrameTooLarge(ProtocolError):
    """A size prefix above the configured maximum (Kafka's socket.request.max.bytes)."""
