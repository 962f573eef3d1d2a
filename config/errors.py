"""Config errors that tell the operator exactly where to look."""

from __future__ import annotations

from pathlib import Path


class ConfigError(ValueError):
    """One or more problems in a config file; each line names the file, the entity and the key."""

    def __init__(self, path: Path | str, problems: list[str]) -> None:
        self.path = Path(path)
        self.problems = problems
        super().__init__("\n".join(f"{self.path}: {problem}" for problem in problems))
