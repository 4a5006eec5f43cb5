"""The HTML report in a real browser: headless Chromium (Debian's `chromium`, which .ci/run
installs) loads the report of fixtures of every picture kind at a phone's 390 px, a
laptop's 1280 px and as printed, and the DOM must hold every finding with its pictures, every run's
pictures, and nothing wider than its box. Screenshots go to the test's folder (and to
$VLLM_TRIAGE_SCREENSHOTS when set, to look at them). Skipped, saying why, only where no
browser is installed."""

import json
import os
import shutil
from collections import Counter
from pathlib import Path

import pytest
from devtools import Browser, find_browser

from triage.pipeline import scan
from triage.report import render
from triage.report.pictures import finding_pictures, summary_pictures
from triage.report.runs import shown_runs

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = [  # every kind of picture: overflow and histogram, full and partial memory, a healthy run
    "fixtures/request-many-rejections-v0110.log",
    "fixtures/startup-kv-tokens-v066-journald.log",
    "fixtures/startup-kv-too-small-v1.log",
    "fixtures/request-prompt-only-v033-issue-markdown.log",
    "fixtures/startup-auto-fit-reduced-v0141-tty-colour.log",
    "fixtures/gate/healthy.log",
    "fixtures/runs/restart-after-kv-shortfall-v0110.log",  # a failed run, then one that started
]
VIEWS = [(390, ""), (1280, ""), (794, "print")]  # a phone, a laptop, an A4 page at 96 dpi

# What the page holds and what sticks out: elements wider than the page, or outside their parent.
CHECK = """(() => {
  const name = el => el.tagName.toLowerCase() + (el.className && el.className.baseVal === undefined
      ? '.' + String(el.className).trim().replace(/\\s+/g, '.') : '') + (el.dataset && el.dataset.code ? '#' + el.dataset.code : '');
  const out = {findings: [], runs: [], overflow: [], page: document.documentElement.scrollWidth, viewport: innerWidth};
  const figures = root => [...root.querySelectorAll('figure.picture')].map(f => ({
    kind: f.dataset.kind, caption: !!f.querySelector('figcaption') && f.querySelector('figcaption').textContent.length > 0,
    bars: [...f.querySelectorAll('svg.bar')].map(s => Math.round(s.getBoundingClientRect().width)),
    legend: f.querySelectorAll('ul.legend li').length}));
  for (const a of document.querySelectorAll('article.finding'))
    out.findings.push({code: a.dataset.code, cause: !!a.querySelector('.cause'), fixes: a.querySelectorAll('ol.fixes li').length,
                       figures: figures(a)});
  for (const a of document.querySelectorAll('article.run'))
    out.runs.push({source: a.dataset.source, run: Number(a.dataset.run), figures: figures(a)});
  for (const el of document.querySelectorAll('main *')) {
    const box = el.getBoundingClientRect();
    if (!box.width && !box.height) continue;
    const parent = el.parentElement.getBoundingClientRect();
    if (box.left < parent.left - 1 || box.right > parent.right + 1)
      out.overflow.push(name(el) + ' ' + Math.round(box.left) + '-' + Math.round(box.right) + ' in ' + name(el.parentElement) +
                        ' ' + Math.round(parent.left) + '-' + Math.round(parent.right));
    if (el.clientWidth && el.scrollWidth > el.clientWidth + 1) out.overflow.push(name(el) + ' scrolls ' + el.scrollWidth + '>' + el.clientWidth);
  }
  return JSON.stringify(out);
})()"""


@pytest.fixture(scope="module")
def browser():
    executable = find_browser()
    if executable is None:
        pytest.skip("no Chromium installed (apt-get install chromium): the HTML report was not checked in a browser")
    chromium = Browser(executable)
    yield chromium
    chromium.close()


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    os.chdir(ROOT)
    result = scan(FIXTURES)
    path = tmp_path_factory.mktemp("html") / "report.html"
    path.write_text(render(result, "html"), encoding="utf-8")
    expected_findings = Counter((f.code, tuple(p.kind for p in finding_pictures(f))) for f in result.findings)
    summaries = [summary for summary, _ in shown_runs(result)]  # a run that says nothing has no article
    expected_runs = {(s.source, s.number): [p.kind for p in summary_pictures(s)] for s in summaries}
    return path, expected_findings, expected_runs


@pytest.mark.parametrize(("width", "media"), VIEWS, ids=["390px", "1280px", "print"])
def test_the_report_shows_every_finding_and_picture_and_nothing_overflows(browser, report, width, media):
    path, expected_findings, expected_runs = report
    browser.open(path.as_uri(), width, media=media)
    page = json.loads(browser.evaluate(CHECK))
    shot = path.parent / f"report-{width}{'-' + media if media else ''}.png"
    browser.screenshot(shot)
    if os.environ.get("VLLM_TRIAGE_SCREENSHOTS"):
        shutil.copy(shot, Path(os.environ["VLLM_TRIAGE_SCREENSHOTS"]) / shot.name)

    shown = Counter((f["code"], tuple(p["kind"] for p in f["figures"])) for f in page["findings"])
    assert shown == expected_findings
    assert all(f["cause"] and f["fixes"] for f in page["findings"] if f["code"] in ("VT101", "VT201"))
    runs = {(run["source"], run["run"]): [p["kind"] for p in run["figures"]] for run in page["runs"]}
    assert runs == expected_runs
    assert runs[("fixtures/gate/healthy.log", 1)] == ["memory", "sequences"]
    assert runs[("fixtures/runs/restart-after-kv-shortfall-v0110.log", 1)] == []  # failed: its finding draws it
    figures = [p for f in page["findings"] for p in f["figures"]] + [p for r in page["runs"] for p in r["figures"]]
    assert {p["kind"] for p in figures} == {"overflow", "histogram", "memory", "sequences"}
    for picture in figures:
        assert picture["caption"] and picture["legend"] >= 1
        assert picture["bars"] and min(picture["bars"]) >= 100, picture  # a bar a reader can see
    assert page["page"] <= page["viewport"], "the page scrolls sideways"
    assert page["overflow"] == []
    assert shot.stat().st_size > 10_000  # a page was drawn, not a blank
    # the check sees what sticks out: a bar row wider than its picture is caught
    browser.evaluate("document.querySelector('figure.picture .rows').style.width = '2000px'")
    assert json.loads(browser.evaluate(CHECK))["overflow"]
