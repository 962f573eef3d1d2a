"""`kafka-quota-proxy quotas`: the proxy's quotas read and altered with kafka-configs' own flags.

Stock kafka-configs refuses a key it does not know before it sends anything, so KIP-936's
producer_ids_rate reaches the proxy only through the Admin API; this command speaks that API
(DescribeClientQuotas, AlterClientQuotas) to any bootstrap server, for every key:

    kafka-quota-proxy quotas --bootstrap-server proxy:9192 --alter \\
        --entity-type users --entity-name alice --add-config producer_ids_rate=50
    kafka-quota-proxy quotas --bootstrap-server proxy:9192 --describe --entity-type users

`--command-config` takes a client's properties (security.protocol, sasl.mechanism, and either
sasl.jaas.config or sasl.username / sasl.password, ssl.truststore.location as PEM).
"""

from __future__ import annotations

import argparse
import asyncio
import decimal
import re
import sys
import textwrap
from pathlib import Path

from config.cluster import ClusterSettings
from config.secrets import Secret
from config.tls import parse_tls_side
from protocol.apis import ALTER_CLIENT_QUOTAS, DESCRIBE_CLIENT_QUOTAS
from protocol.client_quotas import (
    AlterEntry,
    DescribeRequest,
    Pairs,
    alter_body,
    alter_errors,
    describe_body,
    read_describe_entries,
)
from proxy.control.cluster import AuthenticationFailed, ClusterClient
from quotas.store import MATCH_ANY, MATCH_DEFAULT, MATCH_EXACT
from quotas.validation import CLIENT_KEYS, DEFAULT_BROKER_KEYS, IP_KEYS, TOPIC_KEYS, USER_KEYS

_TYPES = {
    "users": "user",
    "clients": "client-id",
    "ips": "ip",
    "topics": "topic",
    "brokers": "broker",
}
_SHOWN = {
    "user": "user-principal",
    "client-id": "client-id",
    "ip": "ip",
    "topic": "topic",
    "broker": "broker",
}
_VERSION = 1
_JAAS = re.compile(r'(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"')


def keys_by_entity_type() -> str:
    """The keys --add-config takes, for the command's help: the proxy's own among Kafka's."""
    lines = ["keys --add-config takes, by --entity-type:"]
    for entity_type, keys in (
        ("users", USER_KEYS),
        ("clients", CLIENT_KEYS),
        ("ips", IP_KEYS),
        ("topics", TOPIC_KEYS),
        ("brokers", DEFAULT_BROKER_KEYS),
    ):
        lines += textwrap.wrap(
            ", ".join(keys),
            width=88,
            initial_indent=f"  {entity_type + ':':9}",
            subsequent_indent=" " * 11,
            break_on_hyphens=False,
        )
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = keys_by_entity_type()
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--bootstrap-server", required=True, help="HOST:PORT of the proxy")
    parser.add_argument("--command-config", type=Path, help="client properties (SASL, TLS)")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true")
    action.add_argument("--alter", action="store_true")
    parser.add_argument("--entity-type", action="append", choices=sorted(_TYPES), required=True)
    parser.add_argument("--entity-name", action="append", default=[])
    parser.add_argument("--entity-default", action="append_const", const=None, dest="entity_name")
    parser.add_argument("--add-config", default="", help="k1=v1,k2=v2")
    parser.add_argument("--delete-config", default="", help="k1,k2")


def run(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_run(args))
    except (OSError, TimeoutError, AuthenticationFailed, ValueError) as exc:
        print(f"Error while executing config command: {exc}", file=sys.stderr)
        return 1


async def _run(args: argparse.Namespace) -> int:
    types = [_TYPES[name] for name in args.entity_type]
    names: list[str | None] = list(args.entity_name)
    host, _, port = args.bootstrap_server.rpartition(":")
    client = ClusterClient(cluster_settings(args.command_config), [(host, int(port))], 30.0)
    async with client:
        if args.describe:
            return await _describe(client, types, names)
        if len(names) != len(types):
            raise ValueError("--alter names every entity: --entity-name or --entity-default")
        pairs: Pairs = list(zip(types, names, strict=True))
        ops = _ops(args.add_config, args.delete_config)
        await _check_deletes(client, pairs, ops)
        body = alter_body(_VERSION, [AlterEntry(pairs, ops)], validate_only=False)
        frame = await client.ask(ALTER_CLIENT_QUOTAS, _VERSION, body)
        for _, code, message in alter_errors(frame, _VERSION):
            if code:
                print(f"Error while executing config command: {message} (error {code})")
                return 1
        print(f"Completed updating config for {_entity(pairs)}.")
        return 0


async def _describe(client: ClusterClient, types: list[str], names: list[str | None]) -> int:
    components = []
    for index, entity_type in enumerate(types):
        if index < len(names):
            name = names[index]
            components.append(
                (entity_type, MATCH_EXACT if name is not None else MATCH_DEFAULT, name)
            )
        else:
            components.append((entity_type, MATCH_ANY, None))
    request = DescribeRequest(components, strict=True)
    frame = await client.ask(DESCRIBE_CLIENT_QUOTAS, _VERSION, describe_body(_VERSION, request))
    code, message, entries = read_describe_entries(frame, _VERSION)
    if code:
        print(f"Error while executing config command: {message} (error {code})")
        return 1
    for pairs, values in entries:
        shown = ", ".join(f"{key}={java_double(value)}" for key, value in sorted(values.items()))
        print(f"Quota configs for {_entity(pairs)} are {shown}")
    return 0


async def _check_deletes(
    client: ClusterClient, pairs: Pairs, ops: list[tuple[str, float | None]]
) -> None:
    """As kafka-configs: a key to delete must be set."""
    deleted = [key for key, value in ops if value is None]
    if not deleted:
        return
    components = [(t, MATCH_EXACT if n is not None else MATCH_DEFAULT, n) for t, n in pairs]
    body = describe_body(_VERSION, DescribeRequest(components, strict=True))
    _, _, entries = read_describe_entries(
        await client.ask(DESCRIBE_CLIENT_QUOTAS, _VERSION, body), _VERSION
    )
    present = {key for _, values in entries for key in values}
    missing = [key for key in deleted if key not in present]
    if missing:
        raise ValueError(f"Invalid config(s): {','.join(missing)}")


def _ops(add: str, delete: str) -> list[tuple[str, float | None]]:
    ops: list[tuple[str, float | None]] = []
    for item in filter(None, add.split(",")):
        key, separator, value = item.partition("=")
        try:
            ops.append((key.strip(), float(value)))
        except ValueError:
            raise ValueError(f"Cannot parse quota configuration value for {key}: {value}") from None
        if not separator:
            raise ValueError(f"--add-config takes key=value, got {item!r}")
    ops += [(key.strip(), None) for key in filter(None, delete.split(","))]
    if not ops:
        raise ValueError("--alter needs --add-config or --delete-config")
    return ops


def _entity(pairs: Pairs) -> str:
    return ", ".join(
        f"the default {_SHOWN[t]}" if name is None else f"{_SHOWN[t]} '{name}'" for t, name in pairs
    )


def java_double(value: float) -> str:
    """Java's Double.toString, as kafka-configs prints quota values (1048576.0, 1.0E7)."""
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        text = repr(value)
        return text if "." in text or "e" in text else f"{text}.0"
    sign, digits, exponent = decimal.Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)
    shown = "".join(map(str, digits))
    scale = exponent + len(digits) - 1
    return f"{'-' if sign else ''}{shown[0]}.{shown[1:] or '0'}E{scale}"


def cluster_settings(path: Path | None) -> ClusterSettings:
    """A client's properties file (--command-config) as the proxy's client settings."""
    if path is None:
        return ClusterSettings()
    properties = {}
    for line in path.read_text().splitlines():
        key, separator, value = line.partition("=")
        if separator and not key.lstrip().startswith("#"):
            properties[key.strip()] = value.strip()
    jaas = dict(_JAAS.findall(properties.pop("sasl.jaas.config", "")))
    username = properties.pop("sasl.username", jaas.get("username"))
    password = properties.pop("sasl.password", jaas.get("password"))
    mechanism = properties.pop("sasl.mechanism", "GSSAPI")
    problems: list[str] = []
    tls_keys = {k: v for k, v in properties.items() if k.startswith(("ssl.", "security."))}
    tls = parse_tls_side("command-config", tls_keys, problems)
    if problems:
        raise ValueError("; ".join(problems))
    secret = Secret("(--command-config)", password) if password is not None else None
    return ClusterSettings(tls, mechanism, username, secret, configured=True)
