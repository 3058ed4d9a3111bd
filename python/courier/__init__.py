"""Courier: expert-parallel communication for Mixture-of-Experts models.

The package wraps the C++ library (``courier._courier``):

- :class:`Context`: one rank's view of a job (configuration, backends,
  bootstrap, proxy threads);
- :class:`EpBuffer`: expert-parallel dispatch and combine, with tensors in and
  out as DLPack (numpy arrays on the host backend, torch tensors on GPUs);
- :class:`Error`: every failure of the C++ side, with its message unchanged;
  :class:`CallRefused`, its subclass, a collective call every rank refused
  together before any data moved (the object stays usable);
- :mod:`courier.deep_ep`: DeepEP's ``Buffer`` API on top (docs/python.md).

Launch ranks with ``python -m courier.run -n N PROGRAM ...`` (courier-run).
"""

from __future__ import annotations

import os
import shutil
from typing import Optional

from . import _courier
from ._courier import (
    CallbackBootstrap,
    CallRefused,
    Context,
    DispatchHandle,
    DispatchOutput,
    DtypeView,
    EpBuffer,
    Error,
    LowLatencyHandle,
    LowLatencyOutput,
    TensorRef,
)

__all__ = [
    "CallbackBootstrap",
    "CallRefused",
    "Context",
    "DispatchHandle",
    "DispatchOutput",
    "DtypeView",
    "EpBuffer",
    "Error",
    "LowLatencyHandle",
    "LowLatencyOutput",
    "TensorRef",
    "courier_run_path",
    "package_dir",
]

#: The directory of this package; a wheel keeps libcourier in ``lib/``, the
#: backend plugins in ``lib/courier/`` and courier-run in ``bin/`` under it.
package_dir: str = os.path.dirname(os.path.abspath(__file__))


def courier_run_path() -> Optional[str]:
    """The courier-run launcher: the package's own (a wheel), else
    ``$COURIER_RUN``, else the first on ``PATH``; None when there is none."""
    bundled = os.path.join(package_dir, "bin", "courier-run")
    if os.access(bundled, os.X_OK):
        return bundled
    named = os.environ.get("COURIER_RUN")
    if named:
        return named
    return shutil.which("courier-run")
