"""The public Python API and the three interfaces a contributor implements (``Strategy``,
``Backend``, ``Transport``) say what each argument is and what comes back, in Args/Returns
sections that name every parameter."""

from __future__ import annotations

import inspect

import pytest

import mpitune
from mpitune.analysis import load
from mpitune.backends.base import Backend
from mpitune.scheduling.transport import Transport
from mpitune.strategies.base import Strategy

DOCUMENTED = [
    mpitune.tune_kernel,
    mpitune.run_kernel,
    mpitune.store_results,
    mpitune.create_device_targets,
    mpitune.TuneResults.__init__,
    mpitune.TuneResults.get_best_config,
    load,
    Strategy.ask,
    Strategy.tell,
    Backend.run,
    Backend.retime,
    Transport.bcast,
    Transport.scatter,
    Transport.gather,
    Transport.send,
    Transport.receive,
]


def section(doc: str, name: str) -> str:
    """The lines of a docstring's section ``name`` (``Args``), up to the next section."""
    lines = doc.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == f"{name}:"), None)
    if start is None:
        return ""
    body = []
    for line in lines[start + 1 :]:
        if line.strip().endswith(":") and " " not in line.strip() and not line.startswith(" "):
            break
        body.append(line)
    return "\n".join(body)


@pytest.mark.parametrize("function", DOCUMENTED, ids=lambda f: f.__qualname__)
def test_every_parameter_and_the_return_value_are_described(function):
    doc = inspect.getdoc(function) or ""
    signature = inspect.signature(function)
    parameters = [p for p in signature.parameters.values() if p.name != "self"]
    if parameters:
        described = section(doc, "Args")
        assert described, f"{function.__qualname__}: no Args section"
        for p in parameters:
            shown = f"**{p.name}" if p.kind is p.VAR_KEYWORD else p.name
            assert f"{shown}:" in described, f"{function.__qualname__}: {shown} is not described"
    returns = signature.return_annotation
    if returns not in (None, "None", inspect.Signature.empty) and function.__name__ != "__init__":
        assert section(doc, "Returns"), f"{function.__qualname__}: no Returns section"


def test_a_missing_parameter_is_found():
    def undocumented(a: int, b: int) -> int:
        """Adds.

        Args:
            a: one.

        Returns:
            The sum.
        """
        return a + b

    with pytest.raises(AssertionError, match="b is not described"):
        test_every_parameter_and_the_return_value_are_described(undocumented)
