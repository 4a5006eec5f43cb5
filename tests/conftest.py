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
