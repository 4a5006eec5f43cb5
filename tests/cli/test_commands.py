"""The command table: every command is found from the module it names, and `scan` loads no other."""

import importlib
import subprocess
import sys

from conftest import ROOT

from triage.cli import COMMAND_MODULES, main


def test_the_table_names_every_command_its_modules_register():
    for modules in COMMAND_MODULES.values():
        for module in modules:
            importlib.import_module(f"triage.cli.{module}")
    assert sorted(main.commands) == sorted(COMMAND_MODULES)
    for name in COMMAND_MODULES:
        assert main.get_command(None, name).name == name  # type: ignore[arg-type]
    assert "export" in main.get_command(None, "rules").commands  # type: ignore[union-attr]


def test_a_mistyped_command_is_told_the_close_ones():
    program = "from triage.cli import main\nmain(['scna'])\n"
    done = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == "Error: No such command 'scna'. Did you mean 'scan'?"


def test_scan_imports_no_other_command():
    program = (
        "import sys\nfrom triage.cli import main\n"
        "try:\n    main(['scan', '--format', 'json', 'fixtures/startup-kv-too-small-v1.log'])\n"
        "except SystemExit as stop:\n    print(stop.code, sorted(m for m in sys.modules if m.startswith('triage.cli.')))\n"
    )
    done = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.splitlines()[-1] == "1 ['triage.cli.common', 'triage.cli.scan']"


def test_a_scan_of_a_servers_log_skips_what_only_pastes_and_live_runs_need():
    """Start-up: a healthy server's log needs no partial matching nor loose regex (the regex
    module is 8 ms to import), and no live report; and no class a scan defines leaves
    dataclasses to make its docstring (inspect.signature at import, for each one)."""
    program = (
        "import dataclasses, sys\norig = dataclasses._process_class\nbare = []\n"
        "def process(cls, *args):\n"
        "    if not cls.__dict__.get('__doc__'):\n        bare.append(cls.__qualname__)\n"
        "    return orig(cls, *args)\n"
        "dataclasses._process_class = process\n"
        "from triage.cli import main\n"
        "for log in sys.argv[1:]:\n"
        "    try:\n        main(['scan', '--format', 'json', '--fail-on', 'never', log], standalone_mode=False)\n"
        "    except SystemExit:\n        pass\n"
        "print(sorted(m for m in ('regex', 'triage.report.live') if m in sys.modules), sorted(set(bare)))\n"
    )
    logs = ["fixtures/normal-startup-v0110.log", "fixtures/runs/healthy-v0-v066-tp2.log"]
    done = subprocess.run([sys.executable, "-c", program, *logs], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.splitlines()[-1] == "[] []"
