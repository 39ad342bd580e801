"""Parameter names and values that cannot reach the compiler, the file and Kernel Tuner's cache as
they are written are refused when the spec loads, in one line naming the parameter; what is
accepted is kept as it is (tests/offline/test_exchange_names.py carries it through a run, an
export and an import)."""

from __future__ import annotations

import textwrap

import pytest
from conftest import mpirun, write_scale_spec

from mpitune.errors import SpecError
from mpitune.model.schema import KT_RESULT_KEYS, KT_STATUS_KEY, MAX_NAME, MAX_TEXT_BYTES
from mpitune.spec.load import load_spec

GOOD = """
import enum
import numpy as np
n = 64
kernel_name = "scale"
kernel_source = "scale.c"
lang = "C"
arguments = [np.zeros(n, np.float32), np.ones(n, np.float32), np.int32(n)]
answer = [2 * np.ones(n, np.float32), None, None]
class Colour(enum.IntEnum):
    RED = 1
tune_params = {{"STEP": [1, 2], {params}}}
"""


def spec(tmp_path, params: str, extra: str = ""):
    write_scale_spec(tmp_path)  # provides scale.c
    path = tmp_path / "hostile.py"
    path.write_text(textwrap.dedent(GOOD.format(params=params)) + extra)
    return path


def refusal(tmp_path, params: str, extra: str = "") -> str:
    path = spec(tmp_path, params, extra)
    with pytest.raises(SpecError) as err:
        load_spec(str(path))
    message = str(err.value)
    assert message.startswith(f"{path}: "), message
    assert "\n" not in message
    return message


REFUSED = [
    # A NUL cannot be in a compiler's argument: the measuring worker died on it, with a traceback.
    ("'S': ['a\\x00b', 'c']", "'S' has value 'a\\x00b', which holds the control character '\\x00'"),
    # A line break cuts a #define (gcc's -D keeps what is before it; a #define line ends there).
    ("'S': ['a\\nb']", "'S' has value 'a\\nb', which holds the control character '\\n'"),
    ("'S': ['a\\rb']", "control character '\\r'"),
    ("'S': ['\\x1b[31m']", "control character '\\x1b'"),
    ("'S': ['\\ud800']", "unpaired surrogate"),
    # Longer than one compiler argument holds (128 KiB on Linux): the worker died on E2BIG.
    (f"'S': ['x' * {MAX_TEXT_BYTES + 1}]", f"of {MAX_TEXT_BYTES + 1} bytes; text values are at most {MAX_TEXT_BYTES}"),
    ("'S': ['é' * 600]", "of 1200 bytes"),
    # Kernel Tuner reads these texts as a failure under any key of an entry.
    ("'S': ['InvalidConfig', 'ok']", "'S' has value 'InvalidConfig', which Kernel Tuner's cache reads as a failed"),
    ("'S': ['RuntimeFailedConfig']", "'RuntimeFailedConfig', which Kernel Tuner"),
    # Two parameters with commas: ("a,b", "c") and ("a", "b,c") would share the key "a,b,c".
    ("'A': ['a,b', 'a'], 'B': ['c', 'b,c']", "'A' and 'B' both have values with a comma ('a,b', 'b,c')"),
    ("'A': ['x,y'], 'B': ['u,v']", "keep commas to one parameter"),
    # A float column holds 2**53 + 1 as 2**53: two configurations would read back as one.
    (
        "'F': [0.5, 2**53 + 1]",
        "'F' has value 9007199254740993 among floats, an integer that their column of floats cannot hold exactly",
    ),
    ("'E': [1, Colour.RED]", "'E' has value <Colour.RED: 1> of type Colour; use int, float or str"),
    ("'x' * 65: [1]", f"parameter name 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'... is longer than {MAX_NAME}"),
]


@pytest.mark.parametrize("params,phrase", REFUSED, ids=[f"refused-{i}" for i in range(len(REFUSED))])
def test_a_value_that_would_not_be_kept_is_refused_in_one_line(tmp_path, params, phrase):
    message = refusal(tmp_path, params)
    assert message.startswith(f"{tmp_path / 'hostile.py'}: tune_params: ")
    assert phrase in message, message


@pytest.mark.parametrize("name", [*KT_RESULT_KEYS, KT_STATUS_KEY])
def test_names_of_kernel_tuners_own_keys_are_reserved(tmp_path, name):
    """A Kernel Tuner cache entry holds the parameters beside these keys: a parameter so named
    was overwritten in an export (``time``), refused by our own import (``times``), or made every
    configuration a failure (``__error__``). tests/offline/test_exchange_names.py checks the list
    against the keys Kernel Tuner itself writes."""
    message = refusal(tmp_path, f"{name!r}: [1, 2]")
    assert f"parameter name {name!r} is reserved for a result field (ours or Kernel Tuner's)" in message


@pytest.mark.parametrize("name", ["compile_time", "timestamp", "__error__", KT_STATUS_KEY])
def test_a_metric_may_not_take_their_names_either(tmp_path, name):
    message = refusal(tmp_path, "'MODE': [0]", f"metrics = {{{name!r}: lambda p: 1.0}}\n")
    assert f"metric name {name!r} is taken" in message


def test_what_can_be_kept_loads_as_written(tmp_path):
    """Commas in one parameter's values (the key still splits one way), quotes, text beyond
    ASCII, an empty text, a tab-free space, the longest text allowed, booleans, an integer among
    floats that a float holds exactly, 2**53 among integers."""
    longest = "y" * MAX_TEXT_BYTES
    params = (
        f"'OP': ['max(a,b)', 'a,b,c', ''], 'Q': ['\"q\"', \"it's\", 'é ü', {longest!r}], "
        "'B': [True, False], 'F': [0.5, 2, 2**53], 'I': [2**53 + 1, -(2**63)]"
    )
    problem, _ = load_spec(str(spec(tmp_path, params)))
    assert problem.kernel.tune_params == {
        "STEP": [1, 2],
        "OP": ["max(a,b)", "a,b,c", ""],
        "Q": ['"q"', "it's", "é ü", longest],
        "B": [True, False],
        "F": [0.5, 2, 2**53],
        "I": [2**53 + 1, -(2**63)],
    }


def test_a_nul_byte_ends_every_rank_with_code_2_and_one_line_naming_the_parameter(tmp_path):
    """Before, the spec loaded, the run started, and every configuration with the value killed the
    measuring worker with a traceback on stderr (``ValueError: embedded null byte``)."""
    path = spec(tmp_path, "'S': ['a\\x00b', 'c']")
    proc = mpirun(2, ["-m", "mpitune", str(path), "--cache", str(tmp_path / "never.h5")], tmp_path, timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"mpitune: error: {path}: tune_params: 'S' has value 'a\\x00b'"), lines[0]
    assert not (tmp_path / "never.h5").exists()


@pytest.mark.parametrize(
    "define,phrase",
    [
        ('"a" + chr(0)', "defines['X'] is 'a\\x00' for {'STEP': 1, 'MODE': 0}, which holds a NUL character"),
        ('"y" * 100_001', "for {'STEP': 1, 'MODE': 0}, over 100000 bytes"),
    ],
    ids=["nul", "long"],
)
def test_a_define_the_compiler_cannot_take_is_refused_as_the_spec_loads(tmp_path, define, phrase):
    """A ``defines`` entry reaches the compiler as a value does: a NUL or 200 KB in it killed the
    worker too. One that gives it only for a later configuration ends the run with the same line
    (spec_error), as a defines callable that fails there does."""
    extra = f'defines = {{"STEP": "STEP", "MODE": "MODE", "X": lambda p: {define}}}\n'
    message = refusal(tmp_path, "'MODE': [0]", extra)
    assert "defines: " in message and phrase in message, message
