"""The default install's engine, and the same report whichever engine scans.

hyperscan is a default dependency on x86-64 Linux, where its wheels exist: a user who runs
`pip install vllm-triage` there gets the fast anchor pass without knowing about it. Either
engine must then give the very same report, byte for byte, on every fixture and on every
shape of benchmark log (small ones, generated here).
"""

import importlib.metadata
import io
import platform
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from triage import cli
from triage.match.engines import ENGINE_VARIABLE
from triage.match.matcher import Matcher

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import generate  # noqa: E402

FIXTURES = sorted(path.relative_to(ROOT) for path in (ROOT / "fixtures").rglob("*.log*"))
X86_64_LINUX = platform.machine() == "x86_64" and sys.platform == "linux"


def report(path: Path, engine: str | None) -> str:
    """The JSON report of `vllm-triage scan` on path, with the engine forced or (None) chosen by default."""
    result = CliRunner().invoke(
        cli.main, ["scan", "--format", "json", "--fail-on", "never", str(path)], env={ENGINE_VARIABLE: engine},
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.stderr
    return result.stdout


def test_there_are_fixtures_of_each_kind():
    assert len(FIXTURES) >= 30 and any(path.suffix == ".gz" for path in FIXTURES)


@pytest.mark.skipif(not X86_64_LINUX, reason="hyperscan is a default dependency on x86-64 Linux only")
def test_the_default_install_scans_with_hyperscan_on_x86_64_linux(ruleset, monkeypatch):
    requirements = importlib.metadata.requires("vllm-triage") or []
    default = [r for r in requirements if r.startswith("hyperscan") and "extra ==" not in r]
    assert default and "x86_64" in default[0] and "linux" in default[0], requirements
    monkeypatch.delenv(ENGINE_VARIABLE, raising=False)
    assert Matcher(ruleset).engine.name == "hyperscan"
    monkeypatch.setenv(ENGINE_VARIABLE, "re")
    assert Matcher(ruleset).engine.name == "re"  # the variable still forces the stdlib engine


@pytest.fixture(scope="module")
def builtin_rules(builtin_rules_loaded_once):
    pytest.importorskip("hyperscan")


@pytest.mark.parametrize("path", FIXTURES, ids=str)
def test_a_fixture_reports_the_same_bytes_with_either_engine(builtin_rules, monkeypatch, path):
    monkeypatch.chdir(ROOT)
    stdlib = report(path, "re")
    assert report(path, None) == stdlib and '"findings"' in stdlib


@pytest.mark.parametrize("tagged", [None, True], ids=["seeded", "tags-on"])
@pytest.mark.parametrize("shape", generate.SHAPES)
def test_a_benchmark_log_reports_the_same_bytes_with_either_engine(builtin_rules, tmp_path, shape, tagged):
    out = io.BytesIO()
    writer = generate.LogWriter(shape, seed=13, out=out, pool_blocks=3, tagged=tagged)
    writer.run(2 * generate.EVENT_EVERY)
    log = tmp_path / f"{shape}.log"
    log.write_bytes(out.getvalue())
    stdlib = report(log, "re")
    assert report(log, None) == stdlib
    assert all(f'"code": "{code}"' in stdlib for code in writer.counts) and writer.counts  # it found what was injected


@pytest.mark.parametrize("value", ["hyperscan", "pcre"])
def test_an_engine_that_cannot_run_here_is_a_one_line_error(monkeypatch, value):
    monkeypatch.setitem(sys.modules, "hyperscan", None)  # as where it is not installed: import fails
    result = CliRunner().invoke(cli.main, ["scan", str(ROOT / "fixtures" / "startup-kv-too-small-v1.log")],
                                env={ENGINE_VARIABLE: value})
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith(f"vllm-triage: error: {ENGINE_VARIABLE}={value}") and result.stderr.count("\n") == 1


def test_the_stdlib_engine_runs_where_hyperscan_is_not_installed(ruleset, monkeypatch):
    monkeypatch.setitem(sys.modules, "hyperscan", None)
    monkeypatch.delenv(ENGINE_VARIABLE, raising=False)
    assert Matcher(ruleset).engine.name == "re"
