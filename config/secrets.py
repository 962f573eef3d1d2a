"""Secrets in the config file are references, never values: Kafka's config providers'
syntax, `${env:NAME}` (KIP-887's EnvVarConfigProvider), `${file:PATH:KEY}` (KIP-297's
FileConfigProvider, a properties file) and `${directory:DIR:FILE}` (KIP-632's
DirectoryConfigProvider: the whole file is the value, as Kubernetes mounts a Secret's key).
The value is read when it is used, so a rotated secret is taken by the next connection, and
it is never logged, printed or echoed in an error.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

_REFERENCE = re.compile(r"^\$\{(env|file|directory):([^}]+)\}$")


class SecretError(ValueError):
    """A reference that does not resolve; its message never holds the secret."""


@dataclass(frozen=True)
class Secret:
    """Where a secret is, as the config names it (printable: it holds no secret)."""

    reference: str
    #: a secret given to a command directly (a client's --command-config), never shown
    given: str | None = field(default=None, repr=False, compare=False)

    def __str__(self) -> str:
        return self.reference

    def value(self) -> str:
        """The secret, read now."""
        if self.given is not None:
            return self.given
        match = _REFERENCE.match(self.reference)
        assert match is not None
        provider, where = match.groups()
        if provider == "env":
            value = os.environ.get(where)
            if value is None:
                raise SecretError(f"{self.reference}: the environment variable {where} is not set")
            return value
        path, _, key = where.rpartition(":")
        if not path:
            raise SecretError(f"{self.reference}: expected ${{{provider}:PATH:KEY}}")
        if provider == "directory":  # a file named KEY in the directory, read whole
            if "/" in key or key in (".", ".."):  # as Kafka's provider: nothing outside it
                raise SecretError(f"{self.reference}: {key!r} is not a file name")
            path = str(Path(path) / key)
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise SecretError(f"{self.reference}: cannot read {path}: {exc.strerror}") from exc
        except UnicodeDecodeError as exc:
            raise SecretError(f"{self.reference}: {path} is not UTF-8 text") from exc
        if provider == "directory":  # `echo` and editors end a file with a newline
            return text.removesuffix("\n")
        for line in text.splitlines():
            name, separator, value = line.partition("=")
            if separator and name.strip() == key and not name.lstrip().startswith("#"):
                return value.strip()
        raise SecretError(f"{self.reference}: {path} has no key {key!r}")


def secret(value: object) -> Secret | None:
    """A config value as a secret reference; None when it is not one (a literal secret)."""
    if isinstance(value, str) and _REFERENCE.match(value):
        return Secret(value)
    return None
