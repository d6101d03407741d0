"""`make bench` runs every benchmark as written on a fresh clone: each script is in the Makefile's
bench target, and none reaches into tests/ (code outside tests/ never imports from it)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _scripts() -> list[Path]:
    """Bench scripts proper (helper modules such as advisor_ops.py have no `__main__` block)."""
    return [p for p in sorted((ROOT / "bench").glob("*.py")) if '__name__ == "__main__"' in p.read_text()]


def test_make_bench_runs_every_script():
    target = re.search(r"^bench:.*?\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M).group(1)
    assert [p.name for p in _scripts() if f"bench/{p.name}" not in target] == []


def test_no_code_outside_tests_imports_from_tests():
    pattern = re.compile(
        r"^\s*(from|import)\s+(tests\b|support\b|sagemaker_job|constructed_runs|terminal\b|conftest)|"
        r"sys\.path\.insert\(.*tests",
        re.M,
    )
    outside = [*(ROOT / "bench").glob("*.py"), *(ROOT / "smlaunch").rglob("*.py")]
    assert [str(p.relative_to(ROOT)) for p in outside if pattern.search(p.read_text())] == []
