"""What a fleet member missed on its bus, and so whose standings are named again
(record version 3: proxy/enforcement/fleet.py, "Standings").

A reader that missed a record asks every member to name its standings again; a member names
its own again when it is asked, when it hears a member anew (who learns them so), and when it
missed a record itself (the record may have been an ask). A record is missed where another
member's sequence skips one, or where the bus says so (a record it could not read, or the
topic opened again at its end). Sans-IO.
"""

from __future__ import annotations


class Gaps:
    def __init__(self) -> None:
        #: whether this member names every standing again, and asks the others to, at its
        #: next publication
        self.restate = False
        self.asking = False
        #: each other member's last sequence read
        self._sequences: dict[str, int] = {}
        #: how many times records were missed (the connection guard's claims resync on it)
        self.count = 0

    def heard(self, member: str, sequence: int, joined: bool) -> None:
        """A publication of another member; `joined`: it was not heard lately (it learns
        this member's standings, and this one asks for those it may have missed)."""
        if joined:
            self.restate = self.asking = True
        last = self._sequences.get(member)
        if last is not None and sequence > last + 1:
            self.missed()
        if last is None or sequence > last:
            self._sequences[member] = sequence

    def missed(self) -> None:
        self.restate = self.asking = True
        self.count += 1

    def gone(self, member: str) -> None:
        self._sequences.pop(member, None)
