"""The failed-login backoff (proxy/enforcement/failed_logins.py), on its own and as the
SaslAuthenticate handler applies it: exact waits on a virtual clock, with the jitter drawn in
the middle of its range unless a test says otherwise."""

from __future__ import annotations

import pytest
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from config.guards import FailedLoginSettings
from localkafka.inprocess.harness import (
    RecordingCluster,
    VirtualClock,
    connect,
    handler_channel,
    handler_request,
    proxy_context,
)
from localkafka.inprocess.wire import request_frame, response_frame
from protocol.apis import SASL_AUTHENTICATE, SASL_HANDSHAKE
from proxy.enforcement import Enforcement
from proxy.enforcement import failed_logins as module
from proxy.enforcement.failed_logins import FailedLogins
from proxy.handlers.base import Channel, Defer, Forward
from proxy.handlers.registry import HANDLERS
from proxy.runtime.context import ProxyContext
from quotas.engine import QuotaEngine
from quotas.settings import QuotaConfig, QuotaSettings

MS = 1_000_000
SETTINGS = FailedLoginSettings(first_wait_ms=100, max_wait_ms=1_000)
SASL_AUTHENTICATION_FAILED = 58


def guard(settings: FailedLoginSettings | None = SETTINGS) -> FailedLogins:
    return FailedLogins(settings, draw=lambda: 0.5)


def test_each_refusal_doubles_the_wait_up_to_its_maximum() -> None:
    logins = guard()
    waits = []
    for now in range(0, 6000, 1000):
        logins.refused("alice", "10.0.0.1", now)
        waits.append(logins.wait_ms("alice", "10.0.0.9", now))
    assert (
        waits == [(100, "user"), (200, "user"), (400, "user"), (800, "user")] + [(1000, "user")] * 2
    )
    # the address was refused as often: it holds an attempt by another user as long
    assert logins.wait_ms("bob", "10.0.0.1", 5000) == (1000, "address")
    assert logins.wait_ms("bob", "10.0.0.1", 5999) == (1, "address")
    assert logins.wait_ms("bob", "10.0.0.1", 6000) == (0, "")
    assert logins.counts.refused == 6


def test_each_attempt_held_is_held_up_to_a_fifth_longer() -> None:
    """Clients refused together are held until one moment: drawn apart, they do not all
    reach the broker at once."""
    draws = iter([0.0, 1.0, 0.5])
    logins = FailedLogins(SETTINGS, draw=lambda: next(draws))
    logins.refused("alice", "10.0.0.1", 0)
    held = [logins.hold("alice", "10.0.0.1", 0)[0] for _ in range(3)]
    assert held == [100, 120, 110]
    assert logins.hold("bob", "10.0.0.2", 0) == (0, "")  # nothing drawn, nothing counted
    assert (logins.counts.held, logins.counts.held_ms) == ({"user": 3, "address": 0}, 330)


def test_other_users_and_addresses_are_untouched() -> None:
    logins = guard()
    logins.refused("alice", "10.0.0.1", 0)
    assert logins.wait_ms("bob", "10.0.0.2", 0) == (0, "")
    # a token that names no user the proxy can read: its address alone waits
    logins.refused(None, "10.0.0.3", 0)
    assert logins.wait_ms(None, "10.0.0.3", 0) == (100, "address")
    assert logins.wait_ms("carol", "10.0.0.4", 0) == (0, "")


def test_a_success_ends_the_users_wait_and_not_its_addresss() -> None:
    logins = guard()
    for now in (0, 100, 300):
        logins.refused("alice", "10.0.0.1", now)
    logins.accepted("alice", "10.0.0.1")
    assert logins.wait_ms("alice", "10.0.0.1", 301) == (0, "")
    # another user behind the same address, never seen to succeed, still waits
    assert logins.wait_ms("bob", "10.0.0.1", 301) == (399, "address")
    logins.refused("alice", "10.0.0.9", 800)
    assert logins.wait_ms("alice", "10.0.0.9", 800) == (100, "user")


def test_a_wait_long_run_out_starts_again_from_the_first() -> None:
    logins = guard()
    for now in (0, 100, 300):
        logins.refused("alice", "10.0.0.1", now)
    assert logins.wait_ms("alice", "10.0.0.1", 300) == (400, "user")
    # its wait ran out at 700: refused again within max_wait_ms of that, it doubles
    logins.refused("alice", "10.0.0.1", 1700)
    assert logins.wait_ms("alice", "10.0.0.1", 1700) == (800, "user")
    # past it, it starts again
    logins.refused("alice", "10.0.0.1", 2500 + 1001)
    assert logins.wait_ms("alice", "10.0.0.1", 3501) == (100, "user")


def test_memory_is_bounded_by_forgetting_the_refused_longest_ago(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(module, "KEPT", 4)
    logins = guard()
    for n in range(4):
        logins.refused(f"user-{n}", "10.0.0.1", n)
    # five kept (four users and the address, refused last each time): the user refused
    # first is forgotten
    assert logins.wait_ms("user-0", "10.0.0.9", 10) == (0, "")
    assert logins.wait_ms("user-1", "10.0.0.9", 10) == (91, "user")
    assert logins.wait_ms(None, "10.0.0.1", 10) == (793, "address")  # refused four times


def test_without_its_table_nothing_waits_and_a_reload_that_removes_it_forgets_all() -> None:
    off = guard(None)
    off.refused("alice", "10.0.0.1", 0)
    assert off.wait_ms("alice", "10.0.0.1", 0) == (0, "") and off.counts.refused == 0
    logins = guard()
    logins.refused("alice", "10.0.0.1", 0)
    logins.reconfigure(FailedLoginSettings(first_wait_ms=50, max_wait_ms=500))
    assert logins.wait_ms("alice", "10.0.0.1", 0) == (100, "user")  # kept
    logins.reconfigure(None)
    logins.reconfigure(SETTINGS)
    assert logins.wait_ms("alice", "10.0.0.1", 0) == (0, "")


# -- as the SaslAuthenticate handler applies it


def guarded(clock: VirtualClock, settings: FailedLoginSettings = SETTINGS) -> ProxyContext:
    context = proxy_context(Enforcement(QuotaEngine(QuotaConfig(QuotaSettings(), {}))), clock)
    context.login_guard.backoffs = FailedLogins(settings, context.stats.failed_logins, lambda: 0.5)
    return context


def connection(context: ProxyContext, peer: str) -> Channel:
    channel = handler_channel(context, RecordingCluster())
    channel.peer = peer
    handshake = handler_request(
        channel, request_frame(SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    )
    HANDLERS[SASL_HANDSHAKE].on_request(channel, handshake)
    reply = SaslHandshakeResponse(error_code=0, mechanisms=["PLAIN"])
    HANDLERS[SASL_HANDSHAKE].on_response(
        channel, response_frame(SASL_HANDSHAKE, 1, reply), handshake
    )
    return channel


def authenticate(channel: Channel, user: str, now_ms: int, error_code: int) -> str:
    """One PLAIN attempt: 'held' when the handler defers it, else the broker's answer is
    given and 'forwarded' said."""
    token = SaslAuthenticateRequest(auth_bytes=f"\0{user}\0secret".encode())
    request = handler_request(channel, request_frame(SASL_AUTHENTICATE, 2, token), now_ms)
    outcome = HANDLERS[SASL_AUTHENTICATE].on_request(channel, request)
    if isinstance(outcome, Defer):
        return "held"
    assert isinstance(outcome, Forward)
    answer = SaslAuthenticateResponse(
        error_code=error_code, error_message=None, auth_bytes=b"", session_lifetime_ms=0
    )
    frame = response_frame(SASL_AUTHENTICATE, 2, answer)
    HANDLERS[SASL_AUTHENTICATE].on_response(channel, frame, request)
    return "forwarded"


def test_an_attempt_after_a_refusal_is_held_then_goes_on_and_a_success_ends_the_wait() -> None:
    clock = VirtualClock()
    context = guarded(clock)
    refused = connection(context, "10.0.0.1:5000")
    assert authenticate(refused, "alice", 0, SASL_AUTHENTICATION_FAILED) == "forwarded"
    again = connection(context, "10.0.0.1:5001")
    assert authenticate(again, "alice", 0, 0) == "held"
    cluster = again.cluster
    assert isinstance(cluster, RecordingCluster) and cluster.pending == 1
    clock.advance(109 * MS)  # its 100 ms, and a tenth more drawn
    assert (cluster.pending, cluster.watched) == (1, 0)
    clock.advance(1 * MS)  # over: the client is read again, to see whether it has gone
    assert (cluster.pending, cluster.watched) == (1, 1)
    clock.advance(1 * MS)
    assert cluster.pending == 0  # the deferral ends: handled again, it goes to the broker
    token = SaslAuthenticateRequest(auth_bytes=b"\0alice\0secret")
    request = handler_request(again, request_frame(SASL_AUTHENTICATE, 2, token), 111, True)
    assert isinstance(HANDLERS[SASL_AUTHENTICATE].on_request(again, request), Forward)
    ok = SaslAuthenticateResponse(
        error_code=0, error_message=None, auth_bytes=b"", session_lifetime_ms=0
    )
    HANDLERS[SASL_AUTHENTICATE].on_response(
        again, response_frame(SASL_AUTHENTICATE, 2, ok), request
    )
    assert again.user == "alice"
    assert authenticate(connection(context, "10.0.0.1:5002"), "alice", 111, 0) == "forwarded"
    counts = context.stats.failed_logins
    assert (counts.refused, counts.held, counts.held_ms) == (1, {"user": 1, "address": 0}, 110)


def test_another_user_from_another_address_is_never_held() -> None:
    context = guarded(VirtualClock())
    authenticate(connection(context, "10.0.0.1:4000"), "carol", 0, 0)  # before the storm
    for port in range(5000, 5005):
        channel = connection(context, f"10.0.0.1:{port}")
        authenticate(channel, "mallory", 0, SASL_AUTHENTICATION_FAILED)
    assert authenticate(connection(context, "10.0.0.2:6000"), "alice", 0, 0) == "forwarded"
    # from mallory's address: a user not seen to succeed there waits; carol, who had, not
    assert authenticate(connection(context, "10.0.0.1:6000"), "alice", 0, 0) == "held"
    assert authenticate(connection(context, "10.0.0.1:6001"), "carol", 0, 0) == "forwarded"


def test_shadow_mode_counts_the_wait_and_holds_nothing() -> None:
    context = guarded(VirtualClock(), FailedLoginSettings(shadow=True))
    authenticate(connection(context, "10.0.0.1:5000"), "alice", 0, SASL_AUTHENTICATION_FAILED)
    assert authenticate(connection(context, "10.0.0.1:5001"), "alice", 0, 0) == "forwarded"
    assert context.stats.failed_logins.held == {"user": 1, "address": 0}


def test_a_user_that_succeeded_is_not_held_for_its_addresss_refusals() -> None:
    """Clients behind one address (a NAT, a node's pods): an attacker's refusals hold the
    users it tries and the users never seen succeed, not a user whose last login succeeded."""
    logins = guard()
    logins.accepted("alice", "10.0.0.1")
    for now in (0, 100, 300):
        logins.refused("mallory", "10.0.0.1", now)
    assert logins.wait_ms("alice", "10.0.0.1", 300) == (0, "")
    assert logins.wait_ms("bob", "10.0.0.1", 300) == (400, "address")
    # from another address, where she was not seen to succeed, its refusals hold her
    for now in (0, 100):
        logins.refused("mallory", "10.0.0.2", now)
    assert logins.wait_ms("alice", "10.0.0.2", 300) == (0, "")  # ran out at 300
    logins.refused("mallory", "10.0.0.2", 300)
    assert logins.wait_ms("alice", "10.0.0.2", 300) == (400, "address")
    # alice refused once: she is held for her own refusal, and her address's, again
    logins.refused("alice", "10.0.0.1", 300)
    assert logins.wait_ms("alice", "10.0.0.1", 300) == (800, "address")


def test_a_wait_is_capped_and_a_refusal_never_shortens_one() -> None:
    high = FailedLogins(SETTINGS, draw=lambda: 1.0)
    for now in range(5):
        high.refused("grace", "10.0.0.1", now)  # the fifth: 1,600 ms, capped
    assert high.wait_ms("grace", "10.0.0.1", 4) == (1000, "user")
    assert high.hold("grace", "10.0.0.1", 4) == (1200, "user")  # held a fifth longer at most
    # a reload that lowers the cap: the wait under way runs its course
    high.reconfigure(FailedLoginSettings(first_wait_ms=100, max_wait_ms=500))
    high.refused("grace", "10.0.0.1", 100)
    assert high.wait_ms("grace", "10.0.0.1", 100) == (904, "user")


def test_only_an_exchanges_first_token_waits_and_never_a_re_authentication() -> None:
    """A SCRAM exchange's second token goes on whatever was refused meanwhile (the broker
    holds its half of the exchange open); a KIP-368 re-authentication of the user the
    connection proved it is goes on at once."""
    clock = VirtualClock()
    context = guarded(clock)
    scram = handler_channel(context, RecordingCluster())
    scram.peer = "10.0.0.1:5000"
    handshake = handler_request(
        scram, request_frame(SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="SCRAM-SHA-256"))
    )
    HANDLERS[SASL_HANDSHAKE].on_request(scram, handshake)
    reply = SaslHandshakeResponse(error_code=0, mechanisms=["SCRAM-SHA-256"])
    HANDLERS[SASL_HANDSHAKE].on_response(scram, response_frame(SASL_HANDSHAKE, 1, reply), handshake)
    first = SaslAuthenticateRequest(auth_bytes=b"n,,n=grace,r=nonce")
    request = handler_request(scram, request_frame(SASL_AUTHENTICATE, 2, first))
    assert isinstance(HANDLERS[SASL_AUTHENTICATE].on_request(scram, request), Forward)
    server_first = SaslAuthenticateResponse(
        error_code=0, error_message=None, auth_bytes=b"r=nonce+s,s=c2FsdA==,i=4096"
    )
    HANDLERS[SASL_AUTHENTICATE].on_response(
        scram, response_frame(SASL_AUTHENTICATE, 2, server_first), request
    )
    authenticate(connection(context, "10.0.0.1:5001"), "grace", 0, SASL_AUTHENTICATION_FAILED)
    final = SaslAuthenticateRequest(auth_bytes=b"c=biws,r=nonce+s,p=proof")
    request = handler_request(scram, request_frame(SASL_AUTHENTICATE, 2, final))
    assert isinstance(HANDLERS[SASL_AUTHENTICATE].on_request(scram, request), Forward)
    # alice's connection re-authenticates after another alice client was refused
    alice = connection(context, "10.0.0.2:5000")
    assert authenticate(alice, "alice", 0, 0) == "forwarded" and alice.user == "alice"
    authenticate(connection(context, "10.0.0.3:5000"), "alice", 0, SASL_AUTHENTICATION_FAILED)
    handshake = handler_request(
        alice, request_frame(SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    )
    HANDLERS[SASL_HANDSHAKE].on_request(alice, handshake)
    reply = SaslHandshakeResponse(error_code=0, mechanisms=["PLAIN"])
    HANDLERS[SASL_HANDSHAKE].on_response(alice, response_frame(SASL_HANDSHAKE, 1, reply), handshake)
    assert authenticate(alice, "alice", 0, 0) == "forwarded"


def test_a_client_that_gives_up_while_held_never_reaches_the_broker() -> None:
    """Through the connection core: the wait over, the held connection is read again, its
    close is seen, and its SaslAuthenticate goes nowhere."""
    clock = VirtualClock()
    context = guarded(clock)
    authenticate(connection(context, "10.0.0.1:5000"), "alice", 0, SASL_AUTHENTICATION_FAILED)
    core, client, upstream = connect(context)
    handshake = request_frame(SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"), 1)
    core.requests_received(handshake)
    reply = SaslHandshakeResponse(error_code=0, mechanisms=["PLAIN"])
    core.responses_received(response_frame(SASL_HANDSHAKE, 1, reply, 1))
    token = SaslAuthenticateRequest(auth_bytes=b"\0alice\0secret")
    core.requests_received(request_frame(SASL_AUTHENTICATE, 2, token, 2))
    assert len(upstream.written) == 1 and not client.reading  # held: only the handshake sent
    clock.advance(110 * MS)  # the wait is over, and a tenth more drawn
    assert client.reading  # read again: the event loop delivers the client's close now
    core.close()
    clock.advance(10 * MS)
    assert len(upstream.written) == 1  # the attempt went nowhere
    # a client still there, held after a second refusal: its attempt goes on once the wait
    # is over, a moment after its connection is read again
    authenticate(connection(context, "10.0.0.1:5001"), "alice", 0, SASL_AUTHENTICATION_FAILED)
    core, client, upstream = connect(context)
    core.requests_received(handshake)
    core.responses_received(response_frame(SASL_HANDSHAKE, 1, reply, 1))
    core.requests_received(request_frame(SASL_AUTHENTICATE, 2, token, 2))
    assert len(upstream.written) == 1 and not client.reading
    clock.advance(220 * MS)  # 200 ms, and a tenth more drawn
    assert len(upstream.written) == 1 and client.reading
    clock.advance(1 * MS)
    assert len(upstream.written) == 2
