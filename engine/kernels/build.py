"""Build, verify and load the engine's CPU kernels (the .cpp files beside this one).

They are compiled once by `make install` (`python -m engine.kernels.build`) into the
virtualenv as one extension module, then tried in a child process: some VMs advertise AMX
but kill the process that uses it. Only a build that passed that trial, from the current
sources, is loaded; otherwise (no compiler, no AMX, a CPU or VM that refuses it,
HEADSTART_KERNELS=0) `kernels()` is None and the engine keeps torch's own kernels. The
engine never compiles anything.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

log = logging.getLogger(__name__)

NAME = "headstart_kernels"
MODULE = "engine.kernels.build"  # this file, also when run with -m
SOURCES = sorted(Path(__file__).parent.glob("*.cpp"))
HEADERS = sorted(Path(__file__).parent.glob("*.h"))
CPU_FLAGS = ("avx512f", "avx512bw", "avx512vl", "avx512_bf16", "amx_tile", "amx_bf16")
CFLAGS = ["-O3", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512bf16", "-mamx-tile",
          "-mamx-bf16", "-fopenmp"]
VERIFIED = "verified"  # file in the build folder: the hash of the source that passed the trial


def build_dir() -> Path:
    """Where the built module lives: $HEADSTART_KERNEL_DIR, else inside the environment."""
    return Path(os.environ.get("HEADSTART_KERNEL_DIR")
                or Path(sys.prefix) / "share" / "headstart" / "kernels")


def source_hash() -> str:
    digest = hashlib.sha256(" ".join(CFLAGS).encode())
    for path in SOURCES + HEADERS:
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()


def cpu_has_flags(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """True when the CPU reports every instruction set the kernel is compiled for."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return False
    for line in text.splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            return all(flag in flags for flag in CPU_FLAGS)
    return False


def _build() -> None:
    import torch.utils.cpp_extension as cpp

    target = build_dir()
    target.mkdir(parents=True, exist_ok=True)
    # torch runs `ninja` from PATH: put the environment's own (the `ninja` package) first
    scripts = str(Path(sys.executable).parent)
    os.environ["PATH"] = scripts + os.pathsep + os.environ.get("PATH", "")
    # -fopenmp makes at::parallel_for run on torch's pool: the module's libgomp.so.1 is
    # the one torch already loaded (same soname), not a second runtime.
    cpp.load(name=NAME, sources=[str(p) for p in SOURCES], build_directory=str(target),
             extra_cflags=CFLAGS, extra_ldflags=["-fopenmp"], verbose=True)


def _import() -> ModuleType:
    """The built module, imported from its file (no ninja, no build lock)."""
    import torch  # noqa: F401  (the module links against torch's libraries)

    spec = importlib.util.spec_from_file_location(NAME, build_dir() / f"{NAME}.so")
    if spec is None or spec.loader is None:
        raise ImportError(f"no {NAME}.so in {build_dir()}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def verified() -> bool:
    marker = build_dir() / VERIFIED
    return marker.is_file() and marker.read_text().strip() == source_hash()


@functools.cache
def kernels() -> ModuleType | None:
    """The compiled module, or None where it is off, unbuilt, stale or refused."""
    if os.environ.get("HEADSTART_KERNELS", "1") == "0" or not cpu_has_flags():
        return None
    if not verified():
        log.info("CPU kernels not built for these sources (make install); using torch's")
        return None
    try:
        module = _import()
    except Exception as exc:  # a broken build: fall back, never fail
        log.warning("CPU kernels failed to load (%s); using torch's", exc)
        return None
    if not module.amx_ready():
        log.info("Linux refused AMX tile state; using torch's kernels")
        return None
    return module


def trial() -> None:
    """Run both kernels once against float32 references (in a child process)."""
    import numpy as np
    import torch

    module = _import()
    assert module.amx_ready(), "AMX tile state refused"
    from engine.weights.amx_blocks import AmxQ4, AmxQ8
    from engine.weights.packed import Q4Blocks

    rng = np.random.default_rng(0)
    q4 = Q4Blocks(rng.integers(0, 16, (32, 64)).astype(np.uint8),
                  rng.random((32, 2)).astype(np.float32), rng.random((32, 2)).astype(np.float32))
    codes = rng.integers(-127, 128, (32, 64)).astype(np.int8)
    scales = rng.random((32, 2)).astype(np.float32)
    x = torch.randn(3, 64).bfloat16()
    for weight, dense in ((AmxQ4.from_blocks(q4, module), q4.dequantize()),
                          (AmxQ8.from_codes(codes, scales, module),
                           (codes.reshape(32, 2, 32) * scales[..., None]).reshape(32, 64))):
        ref = x.float() @ torch.from_numpy(dense).T
        got = weight.matmul(x).float()
        assert (got - ref).abs().max() <= 0.02 * ref.abs().max(), "wrong results"


def main() -> int:
    """Build the module and try it in a child process; remember a build that passed."""
    marker = build_dir() / VERIFIED
    marker.unlink(missing_ok=True)
    if not cpu_has_flags():
        print(f"[{NAME}] this CPU lacks {', '.join(CPU_FLAGS)}: not built")
        return 0
    try:
        _build()
    except Exception as exc:
        print(f"[{NAME}] build failed, the engine will use torch's kernels: {exc}")
        return 0
    child = subprocess.run([sys.executable, "-c", f"import {MODULE} as k; k.trial()"],
                           capture_output=True, text=True, timeout=300)
    if child.returncode != 0:
        print(f"[{NAME}] trial failed ({child.returncode}), the engine will use torch's "
              f"kernels:\n{child.stderr[-2000:]}")
        return 0
    marker.write_text(source_hash())
    print(f"[{NAME}] built and verified in {build_dir()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
