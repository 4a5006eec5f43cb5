"""Findings kept for the report in memory that barely grows with them.

A big log (a server restarted a hundred times, an error a megabyte) gives thousands of
findings, each a few KiB of rendered sentences; the report is written only at the end,
sorted across runs. FindingStore keeps each finding as its sort figures plus pickled
bytes, compressed a block at a time (the fix sentences of one rule repeat in every
block, which is what compresses), and gives them back one at a time, in the order asked.
Nothing goes to disk: findings quote log lines.
"""

from __future__ import annotations

import pickle
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple, overload

from triage.model import Finding, severity_rank

BLOCK = 64  # findings compressed together


class Place(NamedTuple):
    """What sorting and grouping need, kept uncompressed for each finding."""

    severity: int  # severity_rank
    source: str
    line: int
    run: int


class FindingStore(Sequence[Finding]):
    def __init__(self, findings: Iterable[Finding] = (), block: int = BLOCK):
        self.places: list[Place] = []
        self._blocks: list[bytes] = []  # each: zlib of the pickled list of `block` findings
        self._open: list[Finding] = []  # the findings of the block not yet compressed
        self._block = block
        self._cached: tuple[int, list[Finding]] = (-1, [])  # the block read last
        self.extend(findings)

    def append(self, finding: Finding) -> None:
        """finding: final (once its block is compressed, the store holds a copy of it)."""
        self.places.append(Place(severity_rank(finding.severity), finding.source, finding.line, finding.run))
        self._open.append(finding)
        if len(self._open) == self._block:
            self._blocks.append(zlib.compress(pickle.dumps(self._open, pickle.HIGHEST_PROTOCOL)))
            self._open = []

    def extend(self, findings: Iterable[Finding]) -> None:
        for finding in findings:
            self.append(finding)

    def __len__(self) -> int:
        return len(self.places)

    @overload
    def __getitem__(self, index: int) -> Finding: ...
    @overload
    def __getitem__(self, index: slice) -> list[Finding]: ...
    def __getitem__(self, index: int | slice) -> Finding | list[Finding]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("FindingStore index out of range")
        number, offset = divmod(index, self._block)
        if number == len(self._blocks):
            finding = self._open[offset]
        else:
            if self._cached[0] != number:
                self._cached = (number, pickle.loads(zlib.decompress(self._blocks[number])))
            finding = self._cached[1][offset]
        return finding

    def __iter__(self) -> Iterator[Finding]:
        for index in range(len(self)):
            yield self[index]

    def view(self, indices: list[int]) -> FindingView:
        """These findings, in this order, read as they are used."""
        return FindingView(self, indices)

    def mapped(self, transform: Callable[[Finding], Finding]) -> FindingStore:
        """A store of each finding passed through transform (--redact), read and written once."""
        return FindingStore((transform(finding) for finding in self), self._block)


class FindingView(Sequence[Finding]):
    def __init__(self, store: FindingStore, indices: list[int]):
        self.store, self.indices = store, indices

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, index: int) -> Finding:  # type: ignore[override]
        return self.store[self.indices[index]]

    def __iter__(self) -> Iterator[Finding]:
        for index in self.indices:
            yield self.store[index]


def sorted_findings(findings: Sequence[Finding], key: Callable[[Place], Any]) -> Sequence[Finding]:
    """sorted(findings) by a key over each finding's Place; a store's findings stay where they are."""
    places = places_of(findings)
    return take(findings, sorted(range(len(places)), key=lambda index: key(places[index])))


def places_of(findings: Sequence[Finding]) -> list[Place]:
    if isinstance(findings, FindingStore):
        return findings.places
    return [Place(severity_rank(f.severity), f.source, f.line, f.run) for f in findings]


def take(findings: Sequence[Finding], indices: list[int]) -> Sequence[Finding]:
    """These findings by index, in this order (a store's stay where they are)."""
    if isinstance(findings, FindingStore):
        return findings.view(indices)
    return [findings[index] for index in indices]
