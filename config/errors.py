"""Config errors that tell the operator exactly where to look."""

from __future__ import annotations

from pathlib import Path


class ConfigError(ValueError):
    """One or more problems in a config file; each line names the file, the entity and the key."""

    #: what the program says before the problems
    headline = "invalid config"

    def __init__(self, path: Path | str, problems: list[str]) -> None:
        self.path = Path(path)
        self.problems = problems
        super().__init__("\n".join(f"{self.path}: {problem}" for problem in problems))

    def report(self, program: str = "kafka-quota-proxy") -> str:
        """What the program prints before it exits 2: one problem on one line, so that the
        line a supervisor or `kubectl logs` keeps last is the whole story."""
        if len(self.problems) == 1:
            return f"{program}: {self.headline}: {self}"
        return f"{program}: {self.headline}\n{self}"


class StartupError(ConfigError):
    """What the config asks for, refused by the machine or the cluster: a port in use, a
    bootstrap server that does not answer, a credential the cluster refuses. Named by the key
    that asks for it, since that is what the operator changes (or what tells them where to
    look)."""

    headline = "cannot start"
