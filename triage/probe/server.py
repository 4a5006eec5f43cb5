"""One vLLM server: its /metrics text (from a URL, a saved file or stdin) and the served windows."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from triage.probe.exposition import ExpositionError, Scrape, parse
from triage.probe.fetch import ProbeError, get, get_json, is_url, server_urls


@dataclass(slots=True)
class ServerView:
    source: str
    scrape: Scrape
    windows: dict[str, int] = field(default_factory=dict)  # served model id -> max_model_len
    windows_source: str | None = None
    notes: list[str] = field(default_factory=list)  # what could not be read, and why


def read_target(target: str, timeout: float) -> ServerView:
    if target == "-":
        return ServerView("stdin", parse_text(sys.stdin.buffer.read(), "stdin"))
    if is_url(target):
        return read_server(target, timeout)
    try:
        with open(target, "rb") as handle:
            data = handle.read()
    except OSError as error:
        raise ProbeError(f"{target}: {error.strerror or error}") from None
    return ServerView(target, parse_text(data, target))


def read_server(target: str, timeout: float) -> ServerView:
    metrics_url, models_url = server_urls(target)
    response = get(metrics_url, timeout, accept="text/plain")
    if response.status != 200:
        raise ProbeError(f"{metrics_url}: HTTP {response.status} (a vLLM server answers 200 with its metrics)")
    view = ServerView(metrics_url, parse_text(response.body, metrics_url))
    try:
        view.windows = served_windows(*get_json(models_url, timeout))
        view.windows_source = models_url
    except ProbeError as error:
        view.notes.append(f"served window unknown: {error}")
    return view


def parse_text(data: bytes, source: str) -> Scrape:
    try:
        return parse(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ProbeError(f"{source}: not text (not a Prometheus metrics text)") from None
    except ExpositionError as error:
        raise ProbeError(f"{source}: {error}") from None


def served_windows(status: int, body: object) -> dict[str, int]:
    """/v1/models -> {id: max_model_len}; a LoRA card (max_model_len null) gets its base model's."""
    cards = body.get("data") if isinstance(body, dict) else None
    if status != 200 or not isinstance(cards, list):
        raise ProbeError(f"/v1/models: HTTP {status}, not a model list")
    windows = {c["id"]: c["max_model_len"] for c in cards if isinstance(c, dict) and isinstance(c.get("max_model_len"), int)}
    for card in cards:
        if isinstance(card, dict) and card.get("id") not in windows and card.get("parent") in windows:
            windows[card["id"]] = windows[card["parent"]]
    if not windows:
        raise ProbeError("/v1/models states no max_model_len (vLLM before 0.5.0?)")
    return windows
