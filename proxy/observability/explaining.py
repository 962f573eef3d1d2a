"""`/explain?user=...` beside the metrics: a running member's answer to "why is this client
slow?" (quotas/explain.py), as JSON; and the words of an answer, which
`kafka-quota-proxy explain` prints whether a member or the configuration gave it, and
`top`'s detail of a principal shows briefly.

The query's names are the command's options, with underscores: user, client_id, topic,
address, produce_bytes, fetch_bytes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlencode

from quotas.engine import QuotaEngine
from quotas.entities import QuotaEntity
from quotas.explain import HereRates, Query, Sources, explain
from quotas.managers import QuotaManager
from quotas.settings import QuotaConfig
from quotas.store import ALTERED, FILE, QuotaStore

#: the query's names, each with the Query field it fills
_NAMES = ("user", "client_id", "topic", "address", "produce_bytes", "fetch_bytes")
_SIZES = ("produce_bytes", "fetch_bytes")


def query_string(query: Query) -> str:
    """The URL query that asks for `query`."""
    given = {name: getattr(query, name) for name in _NAMES}
    return urlencode({name: value for name, value in given.items() if value is not None})


def query_of(raw: str) -> Query:
    """A URL query read back; ValueError names what is wrong with it."""
    params = parse_qs(raw, keep_blank_values=True)
    unknown = sorted(set(params) - set(_NAMES))
    if unknown:
        raise ValueError(f"unknown parameter {unknown[0]!r}: known are {', '.join(_NAMES)}")
    if "user" not in params:
        raise ValueError("name the principal: ?user=NAME[&client_id=ID] (user= for none)")
    values: dict[str, str | int] = {}
    for name, given in params.items():
        value = given[-1]
        if name in _SIZES:
            if not value.isdigit():
                raise ValueError(f"{name} is a number of bytes, not {value!r}")
            values[name] = int(value)
        else:
            values[name] = value
    return Query(**values)  # type: ignore[arg-type]


def store_sources(store: QuotaStore, file: str) -> Sources:
    """Where each value came from: the config file, or kafka-configs and when (the quota
    store topic's record time)."""

    def source(entity: QuotaEntity, key: str) -> str | None:
        layer = store.source(entity, key)
        if layer == FILE:
            return f"the file {file}"
        if layer == ALTERED:
            at = store.set_at(entity, key)
            if at is None:
                return "kafka-configs"
            when = datetime.fromtimestamp(at / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
            return f"kafka-configs, {when}"
        return None

    return source


class Explainer:
    """The endpoint's side: the member's quotas, engine, clock and fleet part, read at each
    question (a reload or a fleet change replaces them)."""

    def __init__(
        self,
        member: str,
        file: str,
        store: QuotaStore,
        engine: Callable[[], QuotaEngine],
        now_ms: Callable[[], int],
        here: Callable[[], Iterable[tuple[QuotaManager, tuple[str, str], float]]] | None,
    ) -> None:
        self.member = member
        self._file = file
        self._store = store
        self._engine = engine
        self._now_ms = now_ms
        self._here = here

    def answer(self, raw_query: str) -> tuple[int, bytes]:
        """(HTTP status, JSON body)."""
        try:
            query = query_of(raw_query)
        except ValueError as exc:
            return 400, json.dumps({"error": str(exc)}).encode()
        engine = self._engine()
        config = QuotaConfig(engine.config.settings, self._store.limits())
        here: HereRates | None = None
        if self._here is not None:
            here = {(manager.quota_type, tags): rate for manager, tags, rate in self._here()}
        explained = explain(
            query,
            config,
            store_sources(self._store, self._file),
            engine,
            self._now_ms(),
            here,
            self._store.ip_rates(),
        )
        explained.answered_by = self.member
        return 200, json.dumps(explained.as_json()).encode()


def words(answer: Mapping[str, Any]) -> list[str]:
    """An answer, in words: each key's entity, rule, value and source, then what its
    sensor holds now where a member answered, then what holds the client."""
    principal = f"user={answer['user'] or '(none)'} client-id={answer['client_id'] or '(none)'}"
    by = answer["answered_by"]
    source = "the configuration alone" if by == "config" else f"member {by}"
    lines = [f"{principal}: from {source}"]
    for heading, part in (("", "quotas"), ("topic: ", "topic"), ("address: ", "address")):
        for applied in answer[part]:
            lines += _applied(heading, applied)
    for hold in answer["ceilings"]:
        line = f"{hold['key']} of {hold['scope']}: {_number(hold['ceiling'])}/s; {hold['standing']}"
        if hold["allowance"] is not None:
            line += (
                f"; sheds: its allowance {_number(hold['allowance'])}/s, "
                f"using {_number(hold['rate'])}/s"
            )
        else:
            line += "; holds nobody now"
        lines.append(line)
    lines.append("what holds it:")
    lines += [f"  {hold}" for hold in answer["holds"]]
    return lines


def _applied(heading: str, applied: Mapping[str, Any]) -> list[str]:
    value = "unlimited" if applied["value"] is None else _number(applied["value"])
    line = f"{heading}{applied['key']} = {value}"
    if applied["entity"] is not None:
        line += f" from {applied['entity']}"
        if applied["source"]:
            line += f" ({applied['source']})"
    lines = [line, f"  why: {applied['rule']}"]
    if applied["entity"] is not None:
        lines.append(f"  measured as {applied['measured_as']}, over {applied['window']}")
    live = applied["live"]
    if live is not None:
        unit = "%" if applied["key"] == "request_percentage" else "/s"
        now = f"  now {_number(live['rate'])}{unit} over {live['window_ms'] / 1000:.1f} s"
        if live["here"] is not None:
            now += f", {_number(live['here'])}{unit} of it through this member"
        if live["enforced"] is not None and live["enforced"] != applied["value"]:
            now += f"; enforced here at {_number(live['enforced'])}"
        lines.append(now)
        owed = max(live["throttle_ms"], live["held_ms"])
        if owed:
            lines.append(f"  over its quota: held {owed} ms, under it again after that")
        elif applied["value"] is not None:
            lines.append("  under its quota now")
        if live["next_throttle_ms"] is not None:
            predicted = live["next_throttle_ms"]
            lines.append(f"  the next request of the size asked: throttled {predicted} ms")
    return lines


def _number(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() or value >= 100 else f"{value:,.2f}"


def brief(answer: Mapping[str, Any]) -> list[str]:
    """The keys an entity applies to, a line each: `top`'s detail of a principal."""
    return [
        f"{applied['key']} = {_number(applied['value'])} from {applied['entity']}"
        + (f" ({applied['source']})" if applied["source"] else "")
        + f": {applied['rule']}"
        for part in ("quotas", "topic", "address")
        for applied in answer[part]
        if applied["entity"] is not None
    ]
