"""[proxy] routing = "sni": which upstream a TLS client asked for by name on the one port,
and the names the proxy advertises for the brokers.

Pure: the shell hands over the name a client's ClientHello carries (SNI, read before the
handshake, protocol/client_hello.py) and refuses the handshake when it names nothing served
here, with the alert a TLS server that does not serve that name sends.
"""

from __future__ import annotations

from config.sni import NODE_ID, SniSettings
from protocol.errors import ProtocolError


class UnknownName(ProtocolError):
    """An SNI name that is neither the bootstrap's nor a broker's."""


class SniRoutes:
    def __init__(self, settings: SniSettings, bootstrap_port: int) -> None:
        self.bootstrap_host = settings.bootstrap_host
        self.advertised_port = settings.advertised_port or bootstrap_port
        self._prefix, _, self._suffix = settings.broker_host.partition(NODE_ID)

    def broker_host(self, node_id: int) -> str:
        return f"{self._prefix}{node_id}{self._suffix}"

    def route(self, server_name: str | None) -> int | None:
        """None for the bootstrap's name, broker N's node id for its name."""
        name = (server_name or "").lower()
        if name == self.bootstrap_host:
            return None
        middle = name[len(self._prefix) : len(name) - len(self._suffix)]
        fits = len(name) > len(self._prefix) + len(self._suffix)
        framed = fits and name.startswith(self._prefix) and name.endswith(self._suffix)
        if framed and middle.isdigit() and str(int(middle)) == middle:
            return int(middle)
        raise UnknownName(
            f"{server_name!r} is neither {self.bootstrap_host} nor "
            f"{self._prefix}{NODE_ID}{self._suffix}"
        )
