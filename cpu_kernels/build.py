"""Build, verify and load the engine's CPU kernels (the .cpp files beside this one).

They are compiled once by `make install` (`python -m cpu_kernels.build`) into the
virtualenv as one extension module, in one of two variants picked from the CPU's flags:
"amx" (AMX tiles for the decode matmuls, and every shared kernel) where the CPU has AMX,
else "avx512" (AVX-512 BF16/VNNI: the fused elementwise, attention and int8 prefill kernels,
and VNNI decode matmuls instead of the AMX sources). The build is then tried in a child process
(cpu_kernels/trial.py): some VMs advertise AMX but kill the process that uses it. Only a
build that passed that trial, from the current sources and for this CPU's variant, is
loaded; otherwise (no compiler, no AVX-512, a CPU or VM that refuses it,
HEADSTART_KERNELS=0) `kernels()` is None and the engine keeps torch's own kernels.
HEADSTART_KERNELS=avx512 masks AMX (build and run the avx512 variant on an AMX CPU). The
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
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

log = logging.getLogger(__name__)

NAME = "headstart_kernels"
FOLDER = Path(__file__).parent
TRIAL_MODULE = "cpu_kernels.trial"
AMX_SOURCES = ("group_quant_matmul.cpp",)  # AMX tile instructions
AVX512_ONLY_SOURCES = ("vnni_matmul.cpp",)  # the decode matmuls where there is no AMX
HEADERS = sorted(FOLDER.glob("*.h"))
VERIFIED = "verified"  # file in the build folder: the hash of the source that passed the trial


@dataclass(frozen=True)
class Variant:
    """One way of building the module: the CPU flags it needs, its compiler flags, sources."""

    name: str
    cpu_flags: tuple[str, ...]
    cflags: tuple[str, ...]
    amx: bool

    @property
    def sources(self) -> list[Path]:
        skip = AVX512_ONLY_SOURCES if self.amx else AMX_SOURCES
        return [p for p in sorted(FOLDER.glob("*.cpp")) if p.name not in skip]


AMX = Variant("amx", ("avx512f", "avx512bw", "avx512vl", "avx512_bf16", "amx_tile", "amx_bf16"),
              ("-O3", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512bf16", "-mamx-tile",
               "-mamx-bf16", "-fopenmp", "-DHEADSTART_AMX"), amx=True)
AVX512 = Variant("avx512", ("avx512f", "avx512bw", "avx512vl", "avx512_bf16", "avx512_vnni"),
                 ("-O3", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512bf16",
                  "-mavx512vnni", "-fopenmp"), amx=False)
PATH_NAMES = {"amx": "AMX kernels", "avx512": "AVX-512 kernels", None: "torch fallback"}


def build_dir() -> Path:
    """Where the built module lives: $HEADSTART_KERNEL_DIR, else inside the environment."""
    return Path(os.environ.get("HEADSTART_KERNEL_DIR")
                or Path(sys.prefix) / "share" / "headstart" / "kernels")


def source_hash(variant: Variant) -> str:
    digest = hashlib.sha256(" ".join(variant.cflags).encode())
    for path in variant.sources + HEADERS:
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> set[str]:
    """The instruction-set flags the CPU reports (empty where /proc/cpuinfo is missing)."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def variant_for(flags: set[str], setting: str | None = None) -> Variant | None:
    """The variant a CPU with `flags` runs; `setting` is HEADSTART_KERNELS ("0": none,
    "avx512": AMX masked). None: torch's own kernels."""
    setting = os.environ.get("HEADSTART_KERNELS", "1") if setting is None else setting
    if setting == "0":
        return None
    candidates = (AVX512,) if setting == "avx512" else (AMX, AVX512)
    return next((v for v in candidates if all(f in flags for f in v.cpu_flags)), None)


def cpu_variant() -> Variant | None:
    return variant_for(cpu_flags())


def _build(variant: Variant) -> None:
    import torch.utils.cpp_extension as cpp

    target = build_dir()
    target.mkdir(parents=True, exist_ok=True)
    # torch runs `ninja` from PATH: put the environment's own (the `ninja` package) first
    scripts = str(Path(sys.executable).parent)
    os.environ["PATH"] = scripts + os.pathsep + os.environ.get("PATH", "")
    # -fopenmp makes at::parallel_for run on torch's pool: the module's libgomp.so.1 is
    # the one torch already loaded (same soname), not a second runtime.
    cpp.load(name=NAME, sources=[str(p) for p in variant.sources], build_directory=str(target),
             extra_cflags=list(variant.cflags), extra_ldflags=["-fopenmp"], verbose=True)


def import_built() -> ModuleType:
    """The built module, imported from its file (no ninja, no build lock)."""
    import torch  # noqa: F401  (the module links against torch's libraries)

    spec = importlib.util.spec_from_file_location(NAME, build_dir() / f"{NAME}.so")
    if spec is None or spec.loader is None:
        raise ImportError(f"no {NAME}.so in {build_dir()}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def verified(variant: Variant | None = None) -> bool:
    variant = variant or cpu_variant()
    marker = build_dir() / VERIFIED
    return (variant is not None and marker.is_file()
            and marker.read_text().strip() == source_hash(variant))


@functools.cache
def kernels() -> ModuleType | None:
    """The compiled module, or None where it is off, unbuilt, stale or refused."""
    variant = cpu_variant()
    if variant is None:
        return None
    if not verified(variant):
        log.info("CPU kernels not built for these sources (make install); using torch's")
        return None
    try:
        module = import_built()
    except Exception as exc:  # a broken build: fall back, never fail
        log.warning("CPU kernels failed to load (%s); using torch's", exc)
        return None
    if variant.amx and not module.amx_ready():
        log.info("Linux refused AMX tile state; using torch's kernels")
        return None
    return module


def amx_kernels() -> ModuleType | None:
    """The compiled module where it is the AMX variant (the group-quant decode kernels)."""
    module = kernels()
    return module if module is not None and module.variant == "amx" else None


def kernel_path() -> str:
    """What the engine runs on this CPU: "AMX kernels", "AVX-512 kernels" or "torch fallback"."""
    module = kernels()
    return PATH_NAMES[None if module is None else module.variant]


def main() -> int:
    """Build the module and try it in a child process; remember a build that passed."""
    marker = build_dir() / VERIFIED
    marker.unlink(missing_ok=True)
    variant = cpu_variant()
    if variant is None:
        print(f"[{NAME}] this CPU lacks {', '.join(AVX512.cpu_flags)} (or HEADSTART_KERNELS=0): "
              "not built")
        return 0
    try:
        _build(variant)
    except Exception as exc:
        print(f"[{NAME}] build failed, the engine will use torch's kernels: {exc}")
        return 0
    child = subprocess.run([sys.executable, "-m", TRIAL_MODULE, variant.name],
                           capture_output=True, text=True, timeout=300)
    if child.returncode != 0:
        print(f"[{NAME}] trial failed ({child.returncode}), the engine will use torch's "
              f"kernels:\n{child.stderr[-2000:]}")
        return 0
    marker.write_text(source_hash(variant))
    print(f"[{NAME}] {variant.name} variant built and verified in {build_dir()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
