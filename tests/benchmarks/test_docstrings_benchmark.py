"""benchmarks/docstrings.py counts words per sentence of prose, leaving Args/Returns sections out."""

from __future__ import annotations

from conftest import REPO, run_script


def test_words_per_sentence_and_sections_are_counted(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "a.py").write_text(
        '"""One two three. Four five."""\n\n\n'
        "def f(x):\n"
        '    """Six seven eight nine.\n\n    Args:\n        x: a b c d e f g h.\n    """\n'
    )
    done = run_script(REPO / "benchmarks" / "docstrings.py", package)
    assert done.returncode == 0, done.stderr
    assert "docstrings: 2, sentences: 3" in done.stdout
    assert "mean 3.0, median 3, p90" in done.stdout
    assert "with Args/Returns/Raises sections: 1" in done.stdout
