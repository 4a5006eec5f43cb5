"""HTTP GETs with one deadline each and no retries: a probe of a sick server must end."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

MAX_BYTES = 64 * 1024 * 1024  # a /metrics text is kilobytes; more is not a metrics endpoint
CHUNK = 64 * 1024
USER_AGENT = "vllm-triage-probe"


class ProbeError(RuntimeError):
    """One line that says what could not be read and why."""


@dataclass(slots=True)
class Response:
    url: str
    status: int
    content_type: str
    body: bytes


def get(url: str, timeout: float, accept: str = "*/*") -> Response:
    """GET url; the whole exchange (connect, headers, body) within `timeout` seconds.
    An HTTP error status is returned, not raised: the caller says what it means."""
    deadline = time.monotonic() + timeout
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT, "Accept": accept})
    try:
        try:
            answer = urllib.request.urlopen(request, timeout=timeout)
        except urllib.error.HTTPError as error:
            answer = error
        with answer:
            body = read_until(answer, deadline, url, timeout)
            return Response(url, answer.status, answer.headers.get("Content-Type", ""), body)
    except TimeoutError:
        raise ProbeError(f"{url}: no answer within {timeout:g} s") from None
    except urllib.error.URLError as error:
        reason = error.reason
        if isinstance(reason, (TimeoutError, socket.timeout)):
            raise ProbeError(f"{url}: no answer within {timeout:g} s") from None
        raise ProbeError(f"{url}: cannot connect ({getattr(reason, 'strerror', None) or reason})") from None
    except (ConnectionError, OSError) as error:
        raise ProbeError(f"{url}: connection failed ({error.strerror or error})") from None


def read_until(answer: Any, deadline: float, url: str, timeout: float) -> bytes:
    """The body in chunks, so a server that trickles bytes cannot outlast the deadline."""
    pieces: list[bytes] = []
    size = 0
    while True:
        if time.monotonic() > deadline:
            raise ProbeError(f"{url}: the answer did not end within {timeout:g} s")
        piece = answer.read(CHUNK)
        if not piece:
            return b"".join(pieces)
        size += len(piece)
        if size > MAX_BYTES:
            raise ProbeError(f"{url}: more than {MAX_BYTES // (1024 * 1024)} MiB: not a metrics endpoint")
        pieces.append(piece)


def get_json(url: str, timeout: float) -> tuple[int, Any]:
    """(status, the decoded body); ProbeError when the body is not JSON."""
    response = get(url, timeout, accept="application/json")
    try:
        return response.status, json.loads(response.body)
    except (ValueError, UnicodeDecodeError):
        raise ProbeError(f"{url}: HTTP {response.status}, not JSON") from None


def is_url(target: str) -> bool:
    return urllib.parse.urlsplit(target).scheme in ("http", "https")


def server_urls(target: str) -> tuple[str, str]:
    """(metrics URL, models URL) of a server given as its base URL or its /metrics URL."""
    parts = urllib.parse.urlsplit(target)
    path = parts.path.rstrip("/")
    path = path.removesuffix("/metrics")
    base = urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))
    return f"{base}/metrics", f"{base}/v1/models"
