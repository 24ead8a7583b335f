"""A failed check's message on the feedback page says what was checked, never the grader's target:
a late submitter, or next term's class, must not read the answers off this term's pages."""

import re
from pathlib import Path

from labkit.grading.judge import rubric

RUBRIC = Path(__file__).parents[2] / "notebooks" / "rubric.toml"


def _records(ref: str, value: float) -> dict:
    """Records in which ``ref`` (``name.key...``) holds ``value``."""
    name, *keys = ref.split(".")
    for key in reversed(keys):
        value = {key: value}
    return {name: value}


def _targets():
    """Every compare check of the real rubric whose right side is the rubric's own (a number, or a
    record times a factor: a formula)."""
    for lab in rubric.load_rubric(RUBRIC).labs.values():
        for check in lab.checks:
            spec = check.spec
            if check.kind == "compare" and (not isinstance(spec["right"], str) or "factor" in spec):
                yield lab.key, spec


def test_a_failed_comparison_names_the_check_and_the_students_value_not_the_target():
    targets = list(_targets())
    assert len(targets) >= 10  # lab1's reading size, lab3's byte counts, lab5's factors, ...
    for lab, spec in targets:
        wrong = -123456.0 if spec["op"] in (">", ">=") else 123456.0  # far from any target, on its wrong side
        records = _records(spec["left"], wrong)
        if isinstance(spec["right"], str):
            records = {**records, **_records(spec["right"], 7.0)}
        points, message, _ = rubric._eval_compare(spec, None, records)
        right = spec["right"] if not isinstance(spec["right"], str) else 7.0 * spec["factor"]
        assert points == 0 and "1.235e+05" in message, (lab, spec["name"], message)
        # the student's own value may be shown, and a bound the check's name states ("within 2x of")
        said = message.replace(f"{wrong:.4g}", "").replace(spec["name"], "")
        for secret in {f"{right:.4g}", f"{spec.get('factor', right):g}", str(spec["right"])}:
            assert not re.search(rf"(?<![\d.]){re.escape(secret)}(?![\d])", said), (lab, spec["name"], secret, message)
