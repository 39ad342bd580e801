"""One meaning per name: each public function or class at module level is defined in one module.

Two modules with one name make a reader ask which is meant, and an import by name pick the wrong
one. The names shared on purpose are listed below, each with why. Run this file to list every
shared name: ``python tests/test_public_names.py``.
"""

from __future__ import annotations

import ast
import fnmatch
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "mpitune"

# name -> (the modules that may define it, as path patterns from the repository; why).
ALLOWED: dict[str, tuple[tuple[str, ...], str]] = {
    # A plugin's interface: its package finds the module by name and calls these.
    "add_arguments": (("mpitune/commands/*.py", "mpitune/cli/job.py"), "each verb module's arguments; cli/ adds them"),
    "run": (("mpitune/commands/*.py", "mpitune/cli/job.py"), "each verb module's body; cli/ runs it by verb"),
    "create": (
        ("mpitune/strategies/*.py", "mpitune/backends/*.py", "mpitune/backends/*/__init__.py"),
        "each strategy's and backend's factory; the package's own picks one by name",
    ),
    "prewarm": (("mpitune/backends/__init__.py", "mpitune/backends/*/__init__.py"), "a backend's, called by name"),
    "warm_up": (("mpitune/backends/__init__.py", "mpitune/backends/*/*.py"), "a backend's, called by name"),
    "figure": (("mpitune/offline/plots/*.py", "mpitune/offline/front.py"), "each plot's figure, drawn by name"),
    "resolve": (
        ("mpitune/backends/__init__.py", "mpitune/strategies/__init__.py"),
        "each registry's lookup of a user's name, always called qualified",
    ),
    # Two readers, each always called by its module's name: the public pandas loader
    # (mpitune.analysis.load, a name users import) and a replay's measured data (measured.load,
    # about 50 callers across scheduling/, cli/, tests and benchmarks).
    "load": (("mpitune/offline/analysis.py", "mpitune/store/measured/__init__.py"), "analysis.load is public API"),
}


def defined(path: Path) -> list[str]:
    """The public functions and classes ``path`` defines at module level."""
    tree = ast.parse(path.read_text(), str(path))
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return [node.name for node in tree.body if isinstance(node, kinds) and not node.name.startswith("_")]


def homonyms(package: Path = PACKAGE) -> dict[str, list[str]]:
    """Each name defined in more than one module, with those modules (paths from the repository)."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(package.rglob("*.py")):
        for name in defined(path):
            found[name].append(path.relative_to(package.parent).as_posix())
    return {name: modules for name, modules in sorted(found.items()) if len(modules) > 1}


def unexplained(found: dict[str, list[str]]) -> dict[str, list[str]]:
    """The homonyms ``ALLOWED`` does not explain: a name not listed, or a module outside its list."""
    wrong = {}
    for name, modules in found.items():
        patterns = ALLOWED.get(name, ((), ""))[0]
        if not all(any(fnmatch.fnmatch(m, p) for p in patterns) for m in modules):
            wrong[name] = modules
    return wrong


def test_every_public_name_has_one_meaning():
    assert unexplained(homonyms()) == {}


def test_every_allowed_name_says_why_and_is_still_shared():
    """An entry whose name is no longer shared is one to strike: the list stays short."""
    assert all(patterns and why for patterns, why in ALLOWED.values())
    assert sorted(set(ALLOWED) - set(homonyms())) == []


def test_a_second_definition_is_seen(tmp_path):
    """The check is only worth something if a homonym fails it: plant one."""
    package = tmp_path / "mpitune"
    for room in ("store", "offline", "commands"):
        (package / room).mkdir(parents=True)
    (package / "store" / "a.py").write_text("def load(path):\n    pass\n\n\ndef _private():\n    pass\n")
    (package / "offline" / "b.py").write_text("class load:\n    pass\n\n\ndef _private():\n    pass\n")
    (package / "commands" / "c.py").write_text("def run(args):\n    pass\n")
    (package / "commands" / "d.py").write_text("def run(args):\n    pass\n")
    found = homonyms(package)
    assert found == {
        "load": ["mpitune/offline/b.py", "mpitune/store/a.py"],
        "run": ["mpitune/commands/c.py", "mpitune/commands/d.py"],
    }
    assert unexplained(found) == {"load": ["mpitune/offline/b.py", "mpitune/store/a.py"]}


if __name__ == "__main__":
    shared = homonyms()
    for name, modules in shared.items():
        print(f"{name}: {', '.join(modules)}{'' if name in ALLOWED else '  (not allowed)'}")
    print(f"{len(shared)} names defined in more than one module; {len(unexplained(shared))} not allowed")
    sys.exit(0)
