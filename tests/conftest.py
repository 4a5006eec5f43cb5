import functools
from pathlib import Path

import pytest

from triage.matcher import Matcher
from triage.ruleset import load_rules

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


@pytest.fixture(scope="session")
def ruleset():
    return load_rules()


@pytest.fixture(scope="session")
def matcher(ruleset):
    return Matcher(ruleset)


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
    import triage.cli

    cached = functools.cache(lambda paths: triage.cli.load_rules(paths))
    original = triage.cli.load_ruleset
    triage.cli.load_ruleset = lambda paths: cached(tuple(paths)) if not paths else original(paths)
    yield
    triage.cli.load_ruleset = original
