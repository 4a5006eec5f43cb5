"""Rule files from someone else: they may not run code, eat memory or hang a scan."""

import subprocess
import sys
import textwrap

import pytest
import yaml

from triage.rules.expr import Expression, Missing
from triage.rules.ruleset import MAX_RULE_FILE_BYTES, RuleError, load_rules

VT101_LINE = (
    "ERROR 03-02 09:14:11 [serving_chat.py:212] This model's maximum context length is 8192 tokens. "
    "However, you requested 9100 tokens (8100 in the messages, 1000 in the completion). "
    "Please reduce the length of the messages or completion."
)


def rule_file(tmp_path, body: str = "", *, regex: str = r"STALL (?P<n>\d+)", name: str = "user.yaml", extra: str = ""):
    """A valid user rule file; `body` and `extra` put hostile parts where a rule would hold them."""
    text = textwrap.dedent(
        """\
        stage: runtime
        {extra}
        rules:
          - code: VT990
            name: user-stall
            title: A user rule
            severity: warning
            keywords: [STALL]
            patterns:
              - regex: '{regex}'
        {body}
            examples:
              match:
                - STALL 12
        """
    ).format(regex=regex.replace("'", "''"), body=textwrap.indent(textwrap.dedent(body), "    "), extra=extra)
    path = tmp_path / name
    path.write_text(text)
    return path


def refusal(path) -> str:
    with pytest.raises(RuleError) as caught:
        load_rules([path])
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_valid_user_rule_file_loads(tmp_path):
    ruleset = load_rules([rule_file(tmp_path, "cause: stalled {n} times\n")])
    assert ruleset.by_code("VT990").cause[0].text == "stalled {n} times"


# --- YAML: safe loader only, with limits ----------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "!!python/object/apply:os.system ['touch {marker}']",
        "!!python/object/new:subprocess.Popen [['touch', '{marker}']]",
        "!!python/name:os.system",
        "!!python/module:os",
        "!mytag {{a: 1}}",
    ],
)
def test_python_and_unknown_tags_are_refused_with_file_and_line(tmp_path, value):
    marker = tmp_path / "ran"
    path = rule_file(tmp_path, f"description: {value.format(marker=marker)}\n")
    message = refusal(path)
    assert message.startswith(f"{path}:11: ")
    assert "not allowed" in message
    assert not marker.exists()


def billion_laughs(levels: int = 9) -> str:
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, levels):
        refs = ", ".join([f"*l{level - 1}"] * 9)
        lines.append(f"l{level}: &l{level} [{refs}]")
    return "\n".join(lines)


def expanded_values(node, memo):
    """Values a composed node stands for, counted without building them."""
    if id(node) not in memo:
        children = node.value if isinstance(node.value, list) else []
        parts = [p for c in children for p in (c if isinstance(c, tuple) else (c,))]
        memo[id(node)] = 1 + sum(expanded_values(p, memo) for p in parts)
    return memo[id(node)]


def test_an_alias_bomb_is_refused_before_it_is_expanded(tmp_path):
    bomb = billion_laughs()
    # The same document, composed by PyYAML's plain safe loader, stands for ~430 million
    # values: turning the description into a string would take tens of GiB.
    assert expanded_values(yaml.compose(bomb, Loader=yaml.SafeLoader), {}) > 400_000_000
    path = rule_file(tmp_path, "description: *l8\n", extra=f"x-bomb: &top\n  {bomb.replace(chr(10), chr(10) + '  ')}")
    message = refusal(path)
    assert message.startswith(f"{path}:")
    assert "aliases expand to more than" in message


def test_an_alias_that_contains_itself_is_refused(tmp_path):
    path = rule_file(tmp_path, "description: &loop [1, *loop]\n")
    message = refusal(path)
    assert message.startswith(f"{path}:11: ")


def test_deep_nesting_is_refused_not_a_recursion_error(tmp_path):
    deep = "[" * 5000 + "]" * 5000
    message = refusal(rule_file(tmp_path, f"description: {deep}\n"))
    assert "nested deeper than" in message


def test_a_huge_rule_file_is_refused_by_size(tmp_path):
    path = rule_file(tmp_path, "description: >-\n" + "  filler text\n" * (MAX_RULE_FILE_BYTES // 10))
    assert "larger than" in refusal(path)


@pytest.mark.skipif(sys.platform != "linux", reason="needs /dev/zero")
def test_an_endless_rule_file_is_read_only_up_to_the_cap():
    assert "larger than" in refusal("/dev/zero")


# --- expressions and templates ---------------------------------------------------


@pytest.mark.parametrize(
    "expression",
    [
        "n.__class__",
        "n.real",
        "().__class__.__bases__[0].__subclasses__()",
        "__import__('os').system('true')",
        "n ** 99999999",
        "9 ** 9 ** 9",
        "(lambda: 1)()",
        "[x for x in n]",
        "(m := n)",
        "f'{n}'",
        "'text' * 99999999",
        "n[0]",
        "max(*n)",
        "round(n, ndigits=2)",
        "getattr(n, 'real')",
        "__builtins__",
        "(" * 250 + "n" + ")" * 250,
        " + ".join(["n"] * 300),
    ],
)
def test_hostile_derived_expressions_are_refused_at_load(tmp_path, expression):
    body = f"derived:\n  x: {yaml.safe_dump(expression, width=10_000).strip().removesuffix(chr(10) + '...')}\n"
    message = refusal(rule_file(tmp_path, body))
    assert message.startswith(str(tmp_path / "user.yaml") + ":")
    assert "derived x" in message


def test_dunder_names_are_only_names_never_python_objects():
    assert Expression("__builtins__ + 1").evaluate({"__builtins__": 2}) == 3
    with pytest.raises(Missing):
        Expression("__builtins__").evaluate({})
    with pytest.raises(Missing):  # grows past the magnitude cap instead of building a huge integer
        Expression("n * n * n * n * n * n * n * n").evaluate({"n": 10**8})


@pytest.mark.parametrize("template", ["{n:>999999999}", "{n:,.999999f}", "{n:0999999}"])
def test_template_format_specs_that_build_huge_strings_are_refused(tmp_path, template):
    message = refusal(rule_file(tmp_path, f"fixes:\n  - 'Set it to {template}'\n"))
    assert "fixes" in message


def test_a_template_naming_an_unknown_field_is_refused(tmp_path):
    message = refusal(rule_file(tmp_path, "cause: 'stalled {__class__} times'\n"))
    assert "__class__" in message


# --- a pathological regex cannot hang a scan ------------------------------------


@pytest.mark.parametrize(
    "pattern, why",
    [
        ("STALL ((a{100}){100}){100}", "counted repeats"),  # compiling alone takes ~300 MiB and seconds
        ("STALL (?:x{65535}){65535}", "counted repeats"),  # would not finish compiling
        ("STALL a{4294967294}", "counted repeats"),
        ("STALL " + "(" * 3000 + "a" + ")" * 3000, "does not compile"),  # a RecursionError inside regex
        ("STALL " + "a|" * 6000 + "b", "longer than"),
    ],
    ids=["nested-counts", "huge-nested-counts", "huge-count", "deep-groups", "very-long"],
)
def test_regexes_that_explode_when_compiled_are_refused_at_load(tmp_path, pattern, why):
    message = refusal(rule_file(tmp_path, regex=pattern))
    assert message.startswith(f"{tmp_path / 'user.yaml'}:4: VT990: pattern 1")
    assert why in message



def test_a_backtracking_user_rule_is_cut_short_and_named_and_the_scan_goes_on(tmp_path):
    # (?:a|aa)+$ against a long run of 'a' and no end: exponential backtracking
    rules = rule_file(tmp_path, regex=r"STALL (?:a|aa)+$")
    log = tmp_path / "server.log"
    hostile = "WARNING 03-02 09:14:10 [worker.py:1] STALL " + "a" * 80 + "!\n"
    log.write_text(hostile * 6 + VT101_LINE + "\n")
    run = subprocess.run(
        [sys.executable, "-m", "triage", "scan", "--format", "json", "--rules", str(rules), str(log)],
        capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 1, run.stderr  # the real error on the last line was still found
    assert '"code": "VT101"' in run.stdout
    warnings = [line for line in run.stderr.splitlines() if "took longer than" in line]
    assert warnings[0].startswith(f"vllm-triage: warning: {log}:1: rule VT990 pattern 1 took longer than")
    assert "off for the rest of the scan" in warnings[-1]
    assert len(warnings) == 3  # then the pattern is off: six hostile lines cost three timeouts
    assert "Traceback" not in run.stderr
