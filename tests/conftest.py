import functools
import io
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings

from triage.input.reader import iter_chunks
from triage.match.matcher import Matcher
from triage.rules.cache import CACHE_VARIABLE
from triage.rules.ruleset import load_rules

# A property test draws the same examples every run by default, so a red run is a change's
# doing, not a new draw (CI runs once per submission); `--hypothesis-profile=explore` draws
# new ones to look for what the fixed draws miss.
settings.register_profile("fixed", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile("fixed")

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


def scan_events(matcher: Matcher, name: str, text: str) -> list:
    """Every event the matcher reads in the text, as the reader hands it over (a paste, a log)."""
    return list(matcher.scan(name, iter_chunks(io.BytesIO(text.encode()), markers=matcher.markers)))


@pytest.fixture(scope="session")
def ruleset():
    return load_rules()


@pytest.fixture(scope="session")
def matcher(ruleset):
    return Matcher(ruleset)


def pytest_configure(config):
    """The rule cache of every test (and of the CLI runs they start) goes to a fresh folder,
    never the user's ~/.cache; most runs after the first then read the rules from it."""
    folder = tempfile.mkdtemp(prefix="vllm-triage-cache-")
    config._rule_cache = (folder, os.environ.get(CACHE_VARIABLE))
    os.environ[CACHE_VARIABLE] = folder


def pytest_unconfigure(config):
    folder, before = getattr(config, "_rule_cache", (None, None))
    if folder is None:
        return
    shutil.rmtree(folder, ignore_errors=True)
    if before is None:
        os.environ.pop(CACHE_VARIABLE, None)
    else:
        os.environ[CACHE_VARIABLE] = before


def pytest_addoption(parser):
    parser.addoption(
        "--update-golden", action="store_true", default=False,
        help="Rewrite tests/golden/* from the current output (review the diff before committing).",
    )


@pytest.fixture(scope="session")
def update_golden(request):
    return request.config.getoption("--update-golden")


@pytest.fixture(scope="module")
def builtin_rules_loaded_once():
    """CLI tests run scan many times: load the built-in rules once per module, not per run."""
    from triage.cli import common

    original = common.load_ruleset
    cached = functools.cache(original)
    common.load_ruleset = lambda paths: cached(tuple(paths)) if not paths else original(paths)
    yield
    common.load_ruleset = original
