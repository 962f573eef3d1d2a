"""Writing quotas into a config file the proxy loads: `check-config` accepts it and a running
proxy hot-reloads it when it replaces the proxy's config file.

Given the proxy's current file, the file is rewritten in place with tomlkit, which keeps
everything an operator wrote (comments, layout, every other setting and entity) and changes
only the values recommended; without one, the file holds the recommended entities alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import tomlkit
from tomlkit.container import Container
from tomlkit.items import Table

from quotas.validation import USER_KEYS, KeyType

#: the recommended value of each quota key for one entity path: ("alice", "app") is
#: users/alice/clients/app, ("alice", None) is users/alice
Recommendations = Mapping[tuple[str, str | None], Mapping[str, float]]

#: a header this writer made starts with this: the next rewrite replaces it
HEADER_MARK: Final = "Recommended by kafka-quota-proxy report"


def quota_file(recommended: Recommendations, current: Path | None, header: str) -> str:
    text = _without_header(current.read_text()) if current is not None else ""
    document = tomlkit.parse(text)
    users = _table(document, "users")
    for (user, client_id), quotas in sorted(recommended.items(), key=lambda kv: str(kv[0])):
        table = _table(users, user)
        if client_id is not None:
            table = _table(_table(table, "clients"), client_id)
        for key, value in quotas.items():
            # LONG quotas are whole bytes: rounded up, so the recommendation is not undercut
            table[key] = math.ceil(value) if USER_KEYS.get(key) is KeyType.LONG else value
    lines = "".join(f"# {line}\n" for line in header.splitlines())
    return lines + tomlkit.dumps(document)


def _table(parent: Container | Table, key: str) -> Table:
    """The table at `key`, made as a super-table, so only the tables with values get a header
    ([users.alice.clients.app], not also [users] and [users.alice])."""
    if key not in parent:
        parent[key] = tomlkit.table(is_super_table=True)
    table = parent[key]
    assert isinstance(table, Table)
    return table


def _without_header(text: str) -> str:
    """The file without the header an earlier recommendation put on top of it."""
    lines = text.splitlines(keepends=True)
    if not lines or not lines[0].startswith(f"# {HEADER_MARK}"):
        return text
    first = next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))
    return "".join(lines[first:])
