"""A cache of the work derived from rule files, so a scan does not redo it at every start.

Reading the rule files (YAML), checking their regexes and deriving the anchors is most
of a scan's start-up, and it gives the same result for the same bytes. An entry is
named by a hash of everything it was derived from: the package version, the source of
the code that derives it, the Python and regex versions, and the bytes of the rule file
(or the list of anchors). An edited rule file therefore never meets an old entry, and a
file with an error is never stored, so its error is reported at every run.

What is made of one pattern when a line first needs it (its compiled regexes, its loose
form) is kept one entry a pattern, in a folder of their own (PER_PATTERN): both regex
parsers run in Python (a rule's pattern takes 0.2 ms in stdlib re, 0.6 ms in the regex
module, a loose form 2 ms), and a scan that meets a few messages needs dozens.

Entries are plain data (JSON) or a hyperscan database, never pickle, in a directory
only the user can write to: $VLLM_TRIAGE_CACHE, else $XDG_CACHE_HOME/vllm-triage, else
~/.cache/vllm-triage. VLLM_TRIAGE_CACHE=off turns the cache off. An entry that cannot
be read or does not check out is ignored (and rebuilt); a directory that cannot be
written is skipped silently.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

try:  # hashlib's own blake2b, without loading OpenSSL for hashlib's other hashes (start-up)
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - a Python built without it
    from hashlib import blake2b

from triage import __version__

CACHE_VARIABLE = "VLLM_TRIAGE_CACHE"  # a directory, or "off"
OFF = {"off", "0", "no", "false"}
MAX_ENTRIES = 256  # beyond this, writing an entry removes the oldest ones
PER_PATTERN = "patterns"  # the subfolder of entries made of one pattern
MAX_PER_PATTERN = 4096  # its entries: the built-in rules alone make 400 (both compiled forms, the loose form)
FORMAT = b"1"
# The code whose output each kind of entry holds: a change to it (in a checkout, where the
# version stays the same) must not meet entries it made before; a change to other code
# (the matcher's per-line work) keeps them. This module's own code goes into every kind.
DERIVED_BY = {
    # a rule file read and checked (its expressions, templates and lifecycle names), with its anchors
    "rules": ("rules/ruleset.py", "rules/yamlfile.py", "rules/expr.py", "match/anchors.py", "diagnose/lifecycle.py"),
    "loose": ("match/loose.py",),
    "loose-one": ("match/loose.py",),
    "regex": (),
    "re": (),
    # the anchor pass's engines and the anchors found inside each other
    "trie": ("match/engines.py", "match/anchors.py"),
    "entry": ("match/engines.py", "match/anchors.py"),
    "hyperscan": ("match/engines.py",),
    "closure": ("match/engines.py",),
}
DERIVING_MODULES = tuple(dict.fromkeys(name for names in DERIVED_BY.values() for name in names))  # any other kind

_salts: dict[str, bytes] = {}
_base_salt: bytes | None = None
_usable_dirs: dict[str, bool] = {}
_pruned: set[str] = set()  # folders pruned by this process
_compiled_here: dict[tuple[str, str, int], Any] = {}


def cache_dir() -> Path | None:
    """The cache directory, or None when the cache is off."""
    setting = os.environ.get(CACHE_VARIABLE, "").strip()
    if setting.lower() in OFF:
        return None
    if setting:
        return Path(setting)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "vllm-triage"


def entry_key(kind: str, *parts: bytes) -> str:
    digest = blake2b(_code_salt(kind), digest_size=20)
    digest.update(kind.encode())
    for part in parts:
        digest.update(len(part).to_bytes(8, "little"))
        digest.update(part)
    return digest.hexdigest()


def _code_salt(kind: str) -> bytes:
    """What an entry of this kind is derived by: the versions, and the code that derives it."""
    salt = _salts.get(kind)
    if salt is None:
        global _base_salt
        here = Path(__file__).resolve().parent.parent  # the triage package
        if _base_salt is None:
            digest = blake2b(FORMAT, digest_size=20)
            digest.update(f"{__version__} {sys.version} {_module_files('regex')} {_module_files('yaml')}".encode())
            digest.update(_source(here / "rules/cache.py"))
            _base_salt = digest.digest()
        digest = blake2b(_base_salt, digest_size=20)
        for name in DERIVED_BY.get(kind, DERIVING_MODULES):
            digest.update(_source(here / name))
        salt = _salts[kind] = digest.digest()
    return salt


def _source(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:  # pragma: no cover - a zipped install: the version alone
        return path.name.encode()


def _module_files(module: str) -> str:
    """An installed module the cached entries depend on (regex checked their patterns, PyYAML
    read their files), told by its files' sizes and times rather than its version: importing
    it to ask would cost a start-up that may never need it."""
    try:
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.origin:
            return f"{module} unknown"
        origin = Path(spec.origin)
        files = [origin] if spec.submodule_search_locations is None else sorted(origin.parent.iterdir())
        return " ".join(f"{f.name}:{f.stat().st_size}:{f.stat().st_mtime_ns}" for f in files if f.is_file())
    except (ImportError, OSError, ValueError):
        return f"{module} unknown"


def compiled_regex(pattern: str, flags: int = 0) -> Any:
    """regex.compile(pattern, flags), from the cache when this pattern was compiled before.

    An entry holds what the regex module itself pickles a compiled pattern as
    (_pickled_data: the pattern, its flags, the compiled code and group tables), and is
    turned back into one the way unpickling does (_regex.compile of that data): a few
    microseconds instead of the module's parser in Python. The key includes the regex
    module's files, so another version of it never meets the code an older one made."""
    known = _compiled_here.get(("regex", pattern, flags))
    if known is not None:
        return known
    import regex

    name = f"{PER_PATTERN}/regex-{entry_key('regex', flags.to_bytes(8, 'little'), pattern.encode())}.json"
    compiled = _restored_regex(read_json(name), pattern)
    if compiled is None:
        compiled = regex.compile(pattern, flags)
        plain = _plain_regex(compiled._pickled_data)
        if plain is not None:
            write_json(name, plain)
    _compiled_here[("regex", pattern, flags)] = compiled
    return compiled


def _plain_regex(data: tuple) -> list | None:
    """A compiled regex's pickled data as JSON values (its code, bytes, in base64); None
    if it holds anything else (named lists: none of ours do)."""
    import binascii

    source, flags, code, group_index, index_group, named_lists, named_list_indexes, *rest = data
    if named_lists or named_list_indexes or not isinstance(code, bytes) or len(rest) != 4:
        return None
    return [source, flags, binascii.b2a_base64(code, newline=False).decode(), group_index, index_group, *rest]


def _restored_regex(plain: Any, pattern: str) -> Any:
    """The compiled regex back from _plain_regex(), or None when the entry is not that."""
    if not isinstance(plain, list) or len(plain) != 9 or plain[0] != pattern:
        return None
    source, flags, code, group_index, index_group, req_offset, req_chars, req_flags, group_count = plain
    import binascii

    from regex import _regex

    try:
        return _regex.compile(source, flags, binascii.a2b_base64(code), group_index,
                              {int(index): name for index, name in index_group.items()}, {}, [], req_offset,
                              None if req_chars is None else tuple(req_chars), req_flags, group_count)
    except Exception:  # noqa: BLE001 - not data the module takes: compiled again
        return None


def compiled_re(pattern: str) -> re.Pattern[str]:
    """re.compile(pattern), from the cache when this pattern was compiled before: the entry
    holds the code stdlib re's compiler made of it, given back to _sre.compile as re itself
    does (the key includes the Python version, whose re made the code)."""
    known = _compiled_here.get(("re", pattern, 0))
    if known is not None:
        return known
    name = f"{PER_PATTERN}/re-{entry_key('re', pattern.encode())}.json"
    compiled = _restored_re(read_json(name), pattern)
    if compiled is None:
        compiled, plain = _compile_re(pattern)
        if plain is not None:
            write_json(name, plain)
    _compiled_here[("re", pattern, 0)] = compiled
    return compiled


def _compile_re(pattern: str) -> tuple[re.Pattern[str], list | None]:
    """re.compile(pattern) and what _sre.compile made it of, as JSON values (None: this
    Python's re compiles otherwise than the steps below, so nothing is kept)."""
    try:
        from re import _compiler, _parser  # type: ignore[attr-defined]

        tree = _parser.parse(pattern, 0)
        code = _compiler._code(tree, 0)
        groups = tree.state.groupdict
        plain = [pattern, tree.state.flags, code, tree.state.groups - 1, groups]
        compiled = _restored_re(plain, pattern)
    except Exception:  # noqa: BLE001 - the regex is refused below, as re refuses it
        compiled = None
    if compiled is None or compiled != re.compile(pattern):  # equal: same flags, pattern and code
        return re.compile(pattern), None
    return compiled, plain


def _restored_re(plain: Any, pattern: str) -> re.Pattern[str] | None:
    if not isinstance(plain, list) or len(plain) != 5 or plain[0] != pattern:
        return None
    source, flags, code, groups, group_index = plain
    index_group: list[str | None] = [None] * (groups + 1)
    try:
        import _sre

        for group, index in group_index.items():
            index_group[index] = group
        return _sre.compile(source, flags, code, groups, group_index, tuple(index_group))
    except Exception:  # noqa: BLE001 - not data _sre takes: compiled again
        return None


def read(name: str) -> bytes | None:
    """The entry's payload, or None: no cache, no such entry, unreadable or damaged."""
    folder, name = _place(name, create=False)
    if folder is None:
        return None
    try:
        stored = (folder / name).read_bytes()
    except OSError:
        return None
    checksum, _, payload = stored.partition(b"\n")
    if checksum != blake2b(payload, digest_size=20).hexdigest().encode():
        return None  # cut short or changed: rebuilt and written again
    return payload


def write(name: str, payload: bytes) -> None:
    """Store atomically (a reader sees the old entry or the new one, never a part); any
    failure (read-only directory, full disk) just leaves the cache as it was."""
    folder, name = _place(name, create=True)
    if folder is None:
        return
    temporary = folder / f".{name}.{os.getpid()}.tmp"
    try:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(blake2b(payload, digest_size=20).hexdigest().encode() + b"\n" + payload)
        os.replace(temporary, folder / name)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        return
    _prune(folder, MAX_PER_PATTERN if folder.name == PER_PATTERN else MAX_ENTRIES)


def _place(name: str, create: bool) -> tuple[Path | None, str]:
    """The folder an entry named "name" or "subfolder/name" is in (None: no usable one), and its file name."""
    folder = cache_dir()
    subfolder, _, name = name.rpartition("/")
    if folder is None or not _usable(folder, create):
        return None, name
    if subfolder and not _usable(folder := folder / subfolder, create):
        return None, name
    return folder, name


def read_json(name: str, object_hook: Any = None) -> Any:
    """The entry as JSON data, or None; object_hook as for json.loads (an error in it: None)."""
    payload = read(name)
    if payload is None:
        return None
    try:
        return json.loads(payload, object_hook=object_hook)
    except Exception:  # noqa: BLE001 - not JSON, or not the shape the hook takes: no entry
        return None


def write_json(name: str, value: Any) -> None:
    if cache_dir() is None:
        return
    try:
        payload = json.dumps(value, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError):  # not plain data: not cached
        return
    write(name, payload)


def _usable(folder: Path, create: bool) -> bool:
    """Ours alone: owned by this user and writable by no one else (entries are trusted)."""
    known = _usable_dirs.get(str(folder))
    if known is not None:
        return known
    try:
        if create:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = folder.stat()
    except OSError:
        return False  # not made yet (a reader): not remembered, a writer may make it
    getuid = getattr(os, "getuid", None)
    usable = (getuid is None or info.st_uid == getuid()) and not info.st_mode & 0o022
    _usable_dirs[str(folder)] = usable
    return usable


def _prune(folder: Path, keep: int) -> None:
    """Keep the newest `keep` entries: each edit of a rule file adds one. Once a process and
    folder: listing 4,000 entries takes 15 ms, and a scan from a cold cache writes a hundred
    (a process adds at most its rules' patterns beyond the limit)."""
    if str(folder) in _pruned:
        return
    _pruned.add(str(folder))
    try:
        entries = [entry for entry in os.scandir(folder) if entry.is_file() and not entry.name.startswith(".")]
        if len(entries) <= keep:
            return
        entries.sort(key=lambda entry: entry.stat().st_mtime)
        for entry in entries[: len(entries) - keep]:
            os.unlink(entry.path)
    except OSError:
        pass
