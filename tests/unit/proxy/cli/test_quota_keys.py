"""`kafka-quota-proxy quotas --help` names every key it takes, by entity type: stock
kafka-configs does not know the proxy's own, so its help is where an operator finds them."""

from __future__ import annotations

import argparse

from proxy.cli.quotas import add_arguments
from quotas.validation import CLIENT_KEYS, DEFAULT_BROKER_KEYS, IP_KEYS, TOPIC_KEYS, USER_KEYS


def test_the_help_names_each_entity_types_keys() -> None:
    parser = argparse.ArgumentParser(prog="kafka-quota-proxy quotas")
    add_arguments(parser)
    text = parser.format_help()
    sections: dict[str, str] = {}
    name = ""
    for line in text.split("by --entity-type:")[1].splitlines():
        if line[2:3].isalpha():
            name, _, line = line.strip().partition(": ")
        sections[name] = f"{sections.get(name, '')} {line.strip()}"
    for entity_type, keys in (
        ("users", USER_KEYS),
        ("clients", CLIENT_KEYS),
        ("ips", IP_KEYS),
        ("topics", TOPIC_KEYS),
        ("brokers", DEFAULT_BROKER_KEYS),
    ):
        assert sections[entity_type].strip().split(", ") == list(keys)
