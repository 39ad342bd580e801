import sys

from mpitune.cli import main

# Guarded: worker processes started with "spawn" import this module under another name.
if __name__ == "__main__":
    sys.exit(main())
