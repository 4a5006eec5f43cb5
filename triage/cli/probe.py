"""`vllm-triage probe`: size --max-model-len from what vLLM measures of the whole workload."""

from __future__ import annotations

import sys

import click

from triage.cli import main
from triage.cli.common import EXIT_CLEAN, EXIT_FINDINGS, fail

RANGE_HELP = "With --prometheus: the window of the rates, in Prometheus's duration syntax (30m, 24h, 7d)."


@main.command()
@click.argument("target", required=False)
@click.option("--prometheus", "prometheus_url", help="A Prometheus server's URL: the same figures for every vLLM series it scrapes.")
@click.option("--selector", default="", help="With --prometheus: label matchers for vLLM's series, e.g. '{job=\"vllm\"}'.")
@click.option("--range", "range_", default="7d", show_default=True, help=RANGE_HELP)
@click.option("--show-queries", is_flag=True, help="With --prometheus: print the PromQL queries (to paste into Grafana).")
@click.option(
    "--log", "log_path", type=click.Path(dir_okay=False),
    help="The server's log: adds the requests it refused (HTTP 400), which never reach the histograms.",
)
@click.option("--max-model-len", type=click.IntRange(min=1), help="The served window, when /v1/models cannot say (a saved text, a fleet).")
@click.option(
    "--timeout", default=5.0, show_default=True, type=click.FloatRange(0.1, 120),
    help="Seconds for each HTTP request (no retries).",
)
@click.option("--details", is_flag=True, help="With --prometheus: each model's percentile table too, not one line per model.")
@click.option("--format", "format_name", default="text", show_default=True, type=click.Choice(["text", "json"]))
@click.option("--fail-on", default="warning", show_default=True, type=click.Choice(["warning", "never"]),
              help="Exit 1 when a warning is found (preemptions, a full KV cache with requests waiting, refused requests).")
def probe(target: str | None, prometheus_url: str | None, selector: str, range_: str, show_queries: bool,
          log_path: str | None, max_model_len: int | None, timeout: float, details: bool, format_name: str,
          fail_on: str) -> None:
    """Size --max-model-len from a server's /metrics (URL, saved FILE or -) or a fleet through Prometheus."""
    from triage.probe.fetch import ProbeError

    if (target is None) == (prometheus_url is None):
        fail("give a server (URL, a saved metrics FILE or -) or --prometheus URL")
    try:
        if prometheus_url is not None:
            if log_path:
                fail("--log joins one server's log; with --prometheus, ship the logs to Loki (rules export --format loki)")
            shown = "json" if format_name == "json" else ("details" if details else "text")
            text, warned = probe_fleet(prometheus_url, selector, range_, show_queries, max_model_len, timeout, shown)
        else:
            text, warned = probe_server(target or "-", log_path, max_model_len, timeout, format_name)
    except ProbeError as error:
        fail(str(error))
        raise  # unreachable
    click.echo(text, nl=False)
    sys.exit(EXIT_FINDINGS if warned and fail_on == "warning" else EXIT_CLEAN)


def probe_server(target: str, log_path: str | None, max_model_len: int | None, timeout: float,
                 format_name: str) -> tuple[str, bool]:
    from triage.diagnose.workload import (
        Window,
        rejected_by_http,
        scrape_capacity,
        size_model,
    )
    from triage.probe.server import read_target
    from triage.report.probe_format import render_server, render_server_json

    view = read_target(target, timeout)
    log = read_log(log_path) if log_path else None
    models = []
    for name, metrics in sorted(view.scrape.models.items()):
        if name in view.windows:
            window = Window(view.windows[name], view.windows_source)
        else:
            window = Window(max_model_len, "--max-model-len" if max_model_len else None)
        models.append(size_model(metrics, window, scrape_capacity(view.scrape, len(metrics.engines)), log))
    http = rejected_by_http(view.scrape) if view.scrape.has_http_metrics else None
    for note in view.notes:
        click.echo(f"vllm-triage: warning: {note}", err=True)
    missing = sorted({m for sizing in models for m in sizing.missing})
    if missing:
        click.echo(f"vllm-triage: warning: partial report: no observations in {', '.join(missing)}", err=True)
    render = render_server_json if format_name == "json" else render_server
    return render(view.source, models, http, view.notes), any(s.warnings for s in models)


def read_log(path: str):
    """The log's last run: its facts and the requests it refused (a scan, as `scan` does it)."""
    from triage.cli import common
    from triage.diagnose.workload import log_view
    from triage.pipeline import ScanOptions, scan

    result = scan([path], ScanOptions(ruleset=common.load_ruleset(()), standalone_checks=False))
    if not result.inputs:
        fail(result.errors[0] if result.errors else f"{path}: cannot read")
    name = result.inputs[0]
    return log_view(name, result.facts.get(name, {}), list(result.findings))


def probe_fleet(url: str, selector: str, range_: str, show_queries: bool, max_model_len: int | None,
                timeout: float, shown: str) -> tuple[str, bool]:
    """shown: json, text (one line per model) or details (each model's table too)."""
    from triage.probe.fleet import read_fleet
    from triage.report.probe_format import render_fleet, render_fleet_json

    fleet = read_fleet(url, selector, range_, max_model_len, timeout)
    ran = fleet.queries if show_queries else ()
    if shown == "json":
        text = render_fleet_json(url, selector, range_, fleet.models, fleet.estimates, fleet.worst, ran)
    else:
        text = render_fleet(url, selector, range_, fleet.models, fleet.estimates, fleet.worst, ran, details=shown == "details")
    return text, any(s.warnings for s in fleet.models)

