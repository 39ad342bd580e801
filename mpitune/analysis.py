"""The public pandas loader, under the name users import: ``from mpitune.analysis import load``.

It lives in the offline layer (mpitune/offline/analysis.py). This name stays stable for
notebooks and scripts, whatever the package's inner layout.
"""

from mpitune.offline.analysis import Tables, frames, load

__all__ = ["Tables", "frames", "load"]
