"""The sections of a finding, in the order every format shows them: where it is, what vLLM
said, the full line (only with --show-text), the cause, the figures taken from its run, and
each numbered fix. A format picks the sections it shows and lays them out; it does not build
them again from the Finding."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import NamedTuple

from triage.model import Finding

KINDS = ("where", "said", "text", "cause", "figures", "fix")


class Section(NamedTuple):
    kind: str  # one of KINDS
    text: str
    number: int = 0  # a fix's number, from 1; 0 for the other kinds


def finding_sections(finding: Finding) -> Iterator[Section]:
    """Each section the finding has, in KINDS order (a gate assertion quotes no line: no "said")."""
    from triage.report import facts_used, where

    yield Section("where", where(finding))
    if finding.excerpt:
        yield Section("said", finding.excerpt)
    if finding.text is not None:
        yield Section("text", finding.text)
    if finding.cause:
        yield Section("cause", " ".join(finding.cause))
    if finding.facts:
        yield Section("figures", facts_used(finding))
    for number, fix in enumerate(finding.fixes, 1):
        yield Section("fix", fix, number)


def laid_out(finding: Finding, layout: Mapping[str, str], escape: Callable[[str], str] = str) -> list[str]:
    """The sections a format shows, each through its template ({text} escaped for the format,
    {number}); a kind the layout does not name is left out."""
    return [
        layout[section.kind].format(text=escape(section.text), number=section.number)
        for section in finding_sections(finding)
        if section.kind in layout
    ]
