"""The CPU kernels (the .cpp files here) behind one interface, for the engine's model and
the cache's encoder alike: `build.py` compiles, verifies and loads them (`make install`),
docs/internals.md says what each one replaces.

- `kernels()`: the compiled module, or None where it was not built or is refused (the
  callers then use torch's own kernels); `amx_kernels()`: the same, only on AMX builds;
  `kernel_path()`: which path this process runs (for logs and tests);
- `int8_wanted()`: whether many-row matmuls should run in int8 on this CPU;
- `PackedW8A8`: a weight packed for the int8 kernel.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from cpu_kernels.int8 import PackedW8A8

if TYPE_CHECKING:
    from cpu_kernels.build import amx_kernels, kernel_path, kernels

__all__ = ["PackedW8A8", "amx_kernels", "int8_wanted", "kernel_path", "kernels"]
_FROM_BUILD = ("amx_kernels", "kernel_path", "kernels")


def __getattr__(name: str) -> Any:
    """`kernels`, `amx_kernels` and `kernel_path` from build.py, imported on first use, so
    that `python -m cpu_kernels.build` runs build.py once, as itself."""
    if name in _FROM_BUILD:
        from cpu_kernels import build

        return getattr(build, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def int8_wanted(setting: bool | None = None) -> bool:
    """Whether many-row steps run int8 matmuls (`PackedW8A8`): `setting`, else
    HEADSTART_INT8 ("0"/"1"), else where the kernels are the AVX-512 variant (no AMX: bf16
    matmuls run at half the int8 rate there; AMX CPUs keep their bf16 tiles)."""
    from cpu_kernels.build import kernels

    module = kernels()
    if module is None or not hasattr(module, "int8_linear"):
        return False
    if setting is None and os.environ.get("HEADSTART_INT8") in ("0", "1"):
        setting = os.environ["HEADSTART_INT8"] == "1"
    return module.variant == "avx512" if setting is None else setting
