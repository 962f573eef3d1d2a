"""SaslHandshake and SaslAuthenticate: passed on, while the principal builder learns the
principal from the exchange."""

from __future__ import annotations

from proxy.handlers.base import Channel, Forward, Handler, Outcome, Request, Stage


class SaslHandshakeHandler(Handler):
    stage = Stage.AUTHENTICATION

    def on_request(self, channel: Channel, request: Request) -> Outcome:
        channel.runtime.principals.on_handshake_request(channel, request)
        return Forward(request.frame)

    def on_response(self, channel: Channel, frame: bytes, request: Request) -> bytes:
        channel.runtime.principals.on_handshake_response(channel, frame, request)
        return frame


class SaslAuthenticateHandler(Handler):
    stage = Stage.AUTHENTICATION

    def on_request(self, channel: Channel, request: Request) -> Outcome:
        channel.runtime.principals.on_authenticate_request(channel, request)
        return Forward(request.frame)

    def on_response(self, channel: Channel, frame: bytes, request: Request) -> bytes:
        channel.runtime.principals.on_authenticate_response(channel, frame, request)
        return frame
