"""Instant queries against a Prometheus server's HTTP API (/api/v1/query), one deadline each."""

from __future__ import annotations

import math
import urllib.parse
from dataclasses import dataclass

from triage.probe.fetch import ProbeError, get_json


@dataclass(slots=True)
class Sample:
    labels: dict[str, str]
    value: float


def query(base_url: str, expression: str, timeout: float) -> list[Sample]:
    """The instant vector of `expression` now; NaN samples (no data in a bucket) left out."""
    url = f"{base_url.rstrip('/')}/api/v1/query?{urllib.parse.urlencode({'query': expression})}"
    status, body = get_json(url, timeout)
    if not isinstance(body, dict) or "status" not in body:
        raise ProbeError(f"{base_url}: HTTP {status}, not a Prometheus API answer")
    if body["status"] != "success":
        raise ProbeError(f"{base_url}: Prometheus refused {expression!r}: {body.get('error', 'no reason given')}")
    data = body.get("data") or {}
    if data.get("resultType") != "vector":
        raise ProbeError(f"{base_url}: expected an instant vector for {expression!r}, got {data.get('resultType')}")
    samples = []
    for item in data.get("result", []):
        value = float(item["value"][1])
        if not math.isnan(value):
            samples.append(Sample(item.get("metric", {}), value))
    return samples
