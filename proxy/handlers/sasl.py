"""SaslHandshake and SaslAuthenticate: passed on, while the principal builder learns the
principal from the exchange, and the login guard holds an attempt after refusals."""

from __future__ import annotations

from proxy.handlers.base import Channel, Defer, Forward, Handler, Outcome, Request, Stage


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
        if not request.refreshed:  # handled again once its wait is over: it goes on
            runtime = channel.runtime
            starts = not channel.sasl.steps_left  # an exchange's first token
            runtime.principals.on_authenticate_request(channel, request)
            if starts and runtime.login_guard.hold(channel):
                return Defer()
        return Forward(request.frame)

    def on_response(self, channel: Channel, frame: bytes, request: Request) -> bytes:
        claimed = channel.sasl.claimed
        channel.runtime.principals.on_authenticate_response(channel, frame, request)
        channel.runtime.login_guard.answered(channel, claimed)
        return frame
