"""The prefilter's literal anchors, derived from the rule patterns."""

from triage.match.anchors import derive, required_runs


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
