"""DescribeClientQuotas and AlterClientQuotas (KIP-546): kafka-configs and the Admin API read
and alter the quotas the proxy enforces, answered by the proxy from its quota store.

Who may is the cluster's to say, not a second ACL system's: before it answers, the proxy sends
the broker the same request on the client's own connection, an alteration as validate_only
and without the keys Kafka does not know (producer_ids_rate), and a refusal of the cluster's
authorizer reaches the client as the broker gave it. On a cluster without an authorizer anyone
may, as in Kafka. The broker's own quotas are left alone: quotas set through the proxy are
the proxy's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from protocol.apis import ALTER_CLIENT_QUOTAS, DESCRIBE_CLIENT_QUOTAS
from protocol.client_quotas import (
    AlterEntry,
    AlterRequest,
    DescribeRequest,
    Pairs,
    alter_body,
    alter_errors,
    alter_response,
    describe_body,
    describe_error,
    describe_response,
    read_alter,
    read_describe,
)
from proxy.handlers.base import Answer, Channel, Defer, Handler, Outcome, Request
from quotas.admin import Alteration, plan
from quotas.validation import CLIENT_KEYS, IP_KEYS, QuotaError, pairs_of

#: CLUSTER_AUTHORIZATION_FAILED: the cluster's authorizer refused the client
_AUTHORIZATION: Final = frozenset({31})
#: REQUEST_TIMED_OUT: the cluster could not be asked who may
_UNASKED: Final = (7, "the cluster could not be asked whether this client may")
#: the keys a broker knows; others are the proxy's own and left out of what it is asked
_KAFKA_KEYS: Final = frozenset({*CLIENT_KEYS, *IP_KEYS})


@dataclass
class _Altering:
    """What an alteration learned while it was deferred."""

    #: the broker's refusals, by entity
    refused: dict[frozenset[tuple[str, str | None]], tuple[int, str | None]] = field(
        default_factory=dict
    )
    outcomes: list[tuple[Pairs, int, str | None]] = field(default_factory=list)
    asked: bool = False


def _named(pairs: Pairs) -> frozenset[tuple[str, str | None]]:
    return frozenset(dict(pairs).items())


class AlterClientQuotasHandler(Handler):
    def on_request(self, channel: Channel, request: Request) -> Outcome:
        alter = request.parsed_as(AlterRequest, read_alter)
        state = request.state
        if isinstance(state, _Altering):  # handled again: everything is known
            return self._answer(request, alter, state)
        state = request.state = _Altering()
        version = request.header.api_version
        asked = [
            AlterEntry(pairs, [op for op in ops if op[0] in _KAFKA_KEYS])
            for pairs, ops in alter.entries
        ]

        def checked(frame: bytes) -> None:
            for pairs, code, message in alter_errors(frame, version):
                if code in _AUTHORIZATION:
                    state.refused[_named(pairs)] = (code, message)
            state.asked = True
            self._decide(channel, alter, state)

        body = alter_body(version, asked, validate_only=True)
        if channel.cluster.ask(ALTER_CLIENT_QUOTAS, version, body, checked):
            return Defer()
        return self._answer(request, alter, state)

    @staticmethod
    def _decide(channel: Channel, alter: AlterRequest, state: _Altering) -> None:
        """The broker said who may: plan, and store what passes (deferred until stored)."""
        admin = channel.runtime.quota_admin
        allowed = [
            Alteration(pairs, ops)
            for pairs, ops in alter.entries
            if _named(pairs) not in state.refused
        ]
        planned = plan(admin.store, allowed)
        state.outcomes = [(o.pairs, o.code, o.message) for o in planned.outcomes]
        if alter.validate_only or not planned.changes:
            return
        unavailable = admin.unavailable()
        if unavailable is not None:
            state.outcomes = _failed(state.outcomes, *unavailable)
            return
        done = channel.cluster.begin()

        def stored(problem: str | None) -> None:
            if problem is not None:
                state.outcomes = _failed(state.outcomes, 7, problem)  # REQUEST_TIMED_OUT
            done()

        admin.apply(planned.changes, stored)

    @staticmethod
    def _answer(request: Request, alter: AlterRequest, state: _Altering) -> Outcome:
        outcomes = {
            _named(pairs): (pairs, code, message) for pairs, code, message in state.outcomes
        }
        answered = []
        for pairs, _ in alter.entries:  # request order, each entity once
            named = _named(pairs)
            if named in state.refused:
                outcome = (pairs, *state.refused.pop(named))
            elif not state.asked:
                outcome = (pairs, *_UNASKED)
            else:
                found = outcomes.pop(named, None)
                if found is None:
                    continue
                outcome = found
            answered.append(outcome)
        return Answer(alter_response(request.header, answered))


def _failed(
    outcomes: list[tuple[Pairs, int, str | None]], code: int, message: str
) -> list[tuple[Pairs, int, str | None]]:
    """A request's changes are made together or not at all: every entity that passed fails."""
    return [(pairs, *(old if old[0] else (code, message))) for pairs, *old in outcomes]


class DescribeClientQuotasHandler(Handler):
    def on_request(self, channel: Channel, request: Request) -> Outcome:
        describe = request.parsed_as(DescribeRequest, read_describe)
        header, version = request.header, request.header.api_version
        if not request.refreshed:

            def checked(frame: bytes) -> None:
                request.state = describe_error(frame, version)

            body = describe_body(version, describe)
            if channel.cluster.ask(DESCRIBE_CLIENT_QUOTAS, version, body, checked):
                return Defer()
        broker = request.state
        if not isinstance(broker, tuple):
            return Answer(describe_response(header, None, *_UNASKED))
        if broker[0] in _AUTHORIZATION:
            return Answer(describe_response(header, None, *broker))
        try:
            found = channel.runtime.quota_admin.store.describe(describe.components, describe.strict)
        except QuotaError as exc:
            return Answer(describe_response(header, None, exc.code, exc.message))
        entries = {tuple(pairs_of(entity)): values for entity, values in found.items()}
        return Answer(describe_response(header, entries))
