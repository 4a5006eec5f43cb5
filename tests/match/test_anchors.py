"""The prefilter's literal anchors, derived from the rule patterns."""

from triage.match.anchors import derive, may_match_cut, opens_in, openings, required_runs


def test_required_runs_leave_out_optional_and_alternative_text():
    runs = required_runs(r"max seq len \((?P<n>\d+)\)(?: optional tail)?, (?:GiB|GB) KV cache is needed")
    assert runs == ["max seq len (", ")", ", G", " KV cache is needed"]  # "G" is common to GiB and GB
    assert required_runs(r"(?i)case does not matter") is None


def test_derived_anchors_are_safe_literal_pieces_of_the_pattern():
    source = r"This model's maximum context length is (?P<n>\d+) tokens\. However, your request has"
    anchors = derive(source).anchors
    assert 1 <= len(anchors) <= 3
    for anchor in anchors:
        assert 5 <= len(anchor) <= 32
        assert "'" not in anchor and not anchor.startswith(" ") and not anchor.endswith(" ")
        assert any(anchor in run for run in required_runs(source))
    assert not anchors[0][0].isdigit() and anchors[0][0] not in "INPTK "


def _pattern_texts():
    """Every pattern of the built-in rules with each line of every example of its rule."""
    from triage.rules.ruleset import load_rules

    for rule in load_rules().rules:
        lines = [line for example in rule.examples for line in example.text.strip().splitlines()]
        for pattern in rule.patterns:
            yield f"{rule.code}/{pattern.id}", pattern.compiled, lines


def test_openings_never_rule_out_a_partial_match():
    """may_match_cut() and opens_in() say False only where the regex module finds no match cut
    by the text's end (and opens_in only where no match starts either), for every pattern, on
    every cut of every line of its rule's examples and of the other rules' lines."""
    import regex

    cases = list(_pattern_texts())
    every_line = [line for _, _, lines in cases for line in lines]
    checked = 0
    for name, compiled, lines in cases:
        exact = regex.compile(compiled.pattern)
        for line in {*lines, *every_line[::7]}:
            for cut in range(1, len(line) + 1, 3):
                text = line[:cut]
                found = exact.search(text, partial=True)
                if found is not None and found.partial and found.end() > found.start():
                    assert may_match_cut(compiled.pattern, text), f"{name}: {text!r}"
                    checked += 1
                if found is not None and (not found.partial or any(found.end(g) < len(text) for g in found.groupdict()
                                                                   if found.group(g) is not None)):
                    assert opens_in(compiled.pattern, text), f"{name}: {text!r}"
    assert checked > 1000


def test_openings_follow_the_regex_into_its_first_group_and_alternatives():
    assert openings(r"^(?P<ready>Application startup complete\.|Starting vLLM (?:API )?server)") == (
        "Application startup complete.", "Starting vLLM ")
    assert openings(r"(?P<device>GPU|CPU) KV cache size: (?P<n>\d+)") == ("GPU", "CPU")
    assert openings(r"(?i)case does not matter") == ()
    assert openings(r"(?:optional )?text") == ()
    assert not may_match_cut(r"GPU KV cache usage: (?P<u>\d+)%", "INFO Avg prompt throughput: 1.0 tokens/s")
    assert may_match_cut(r"GPU KV cache usage: (?P<u>\d+)%", "INFO Running: 1 reqs, GPU KV ca")
    assert openings(r"^\s*File \"(?P<path>[^\"]+)\"") == ('File "',)
    assert may_match_cut(r"^\s*File \"(?P<path>[^\"]+)\"", "Traceback:   ")
    assert not may_match_cut(r"^\s*File \"(?P<path>[^\"]+)\"", "total_gpu_memory (44.34GiB) x 0.85")
