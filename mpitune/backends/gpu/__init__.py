"""What every GPU backend shares; a platform's backend (cupy/) adds only what differs.

- geometry.py: block and grid dimensions, the source with its defines (pure).
- loading.py: a compiled configuration made launchable, for ``run`` and ``retime`` alike.
- failures.py: what a failed launch means for the configuration and the rank (pure).
- throttling.py: timing once more when the GPU was throttled.
- backend.py: ``GpuBackend``, the measuring, and the hooks a platform implements.

Nothing here imports a GPU library: the hooks do, once a backend is created.
"""
