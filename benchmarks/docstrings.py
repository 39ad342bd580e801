"""How easy the package's docstrings are to scan: words per sentence over every module, class and
function docstring of ``mpitune/``, and how many carry Args/Returns sections.

    python benchmarks/docstrings.py [PACKAGE_DIR]

A sentence ends at '.', '?' or '!' followed by white space; a docstring's Args/Returns/Raises
sections are left out of the sentences (their entries are not prose).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import numpy as np

SECTION = re.compile(r"^\s*(Args|Returns|Raises):\s*$", re.MULTILINE)
SENTENCE_END = re.compile(r"(?<=[.?!])\s+")


def docstrings(package: Path) -> list[str]:
    found = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc:
                    found.append(doc)
    return found


def sentence_words(doc: str) -> list[int]:
    prose = SECTION.split(doc)[0]
    sentences = [s for s in SENTENCE_END.split(" ".join(prose.split())) if s.strip()]
    return [len(s.split()) for s in sentences]


def main() -> int:
    package = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "mpitune"
    docs = docstrings(package)
    words = np.array([n for d in docs for n in sentence_words(d)])
    sections = sum(1 for d in docs if SECTION.search(d))
    print(f"command: python benchmarks/docstrings.py {package}")
    print(f"docstrings: {len(docs)}, sentences: {len(words)}")
    mean, median, p90 = words.mean(), np.median(words), np.percentile(words, 90)
    print(f"words per sentence: mean {mean:.1f}, median {median:.0f}, p90 {p90:.0f}")
    print(f"docstrings with Args/Returns/Raises sections: {sections}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
