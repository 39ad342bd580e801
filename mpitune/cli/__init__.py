"""Command line. ``python -m mpitune [tune] SPEC [flags]`` tunes under MPI.
``python -m mpitune VERB ...`` runs any other verb of the table in verbs.py.

The verbs that tune (``replay``, ``plan``, ``job``) live here. The verbs that read a results
file (``report``, ...) are ``mpitune.commands``' modules. They need neither MPI nor a GPU.

An error the user can fix ends every rank with one line on stderr and ``ExitCode.USER_ERROR``.
``--debug`` shows the traceback behind it. Every output path is ``--out``. The older ``--cache``
(tune) and ``--output`` (replay) stay as aliases, so that scripts keep working.
"""

from __future__ import annotations

import os
import sys
from types import ModuleType

from mpitune.cli.loading import not_python, problem_of_args, replay_of_args, warm_replay, within
from mpitune.cli.parsers import Parser, common, refuse, replay_parser, tune_parser
from mpitune.cli.running import setup_logging, tune_command
from mpitune.cli.verbs import verb_module
from mpitune.errors import UserError
from mpitune.exits import ExitCode
from mpitune.spec.peek import named_lang
from mpitune.store.files import cannot_write


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "replay":
        args = replay_parser().parse_args(argv[1:])
        # The other ranks read their measured data while MPI starts: their replay backends need it.
        return tune_command(args, argv, lambda: replay_of_args(args), warm=lambda: warm_replay(args))
    if argv and argv[0] == "plan":
        from mpitune.cli.planning import plan

        return plan(argv[1:])
    module = verb_module(argv[0]) if argv else None
    if module is not None:
        return _module_verb(argv[0], module, argv[1:])
    args = tune_parser().parse_args(argv[1:] if argv and argv[0] == "tune" else argv)
    refusal = not_python(args.spec)
    if refusal:
        return refuse(refusal)
    return tune_command(
        args,
        argv,
        lambda: within(args.load_timeout, args.spec, lambda: problem_of_args(args)),
        None if args.no_isolation else named_lang(args.spec),
        args.compile_workers,
        lambda build: within(args.load_timeout, args.spec, build, "restrictions", hand_over=True),
    )


def _module_verb(verb: str, module: ModuleType, argv: list[str]) -> int:
    """A verb that a module runs: ``job``, or one that reads a results file."""
    parser = Parser(prog=f"python -m mpitune {verb}", description=module.HELP)
    module.add_arguments(parser)
    common(parser)
    args = parser.parse_args(argv)
    setup_logging(args, 0)
    try:
        code = module.run(args)
        sys.stdout.flush()  # a closed pipe shows here rather than at exit
        return code
    except BrokenPipeError:
        # The reader went away (``report ... | head``): nothing is left to say, and Python must
        # not try to flush into the closed pipe again at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return ExitCode.CLOSED_PIPE
    except UserError as exc:
        if args.debug:
            raise
        print(f"mpitune: error: {exc}", file=sys.stderr)
        return ExitCode.USER_ERROR
    except (OSError, RuntimeError) as exc:
        failed_write = cannot_write(exc)
        if failed_write is None or args.debug:
            raise
        print(f"mpitune: error: {failed_write}", file=sys.stderr)
        return ExitCode.CANNOT_WRITE
