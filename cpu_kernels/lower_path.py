"""Run a command on the kernel path one step below the one this CPU takes.

Users run the engine on CPUs with fewer features than the machine that tests it: an AMX
machine's CI never passes through the avx512 variant, an AVX-512 machine's never through
torch's own kernels. `make test` runs the engine and gateway tests a second time through

    python -m cpu_kernels.lower_path pytest -q tests/engine ...

which picks the next path down from what loads here and runs the command on it:
- AMX kernels → the avx512 variant (HEADSTART_KERNELS=avx512), built once into a folder of
  its own beside the AMX build (HEADSTART_KERNEL_DIR), as an AVX-512 CPU without AMX runs;
- AVX-512 kernels → torch's own kernels (HEADSTART_KERNELS=0), as any other CPU runs;
- torch's kernels already → nothing lower: the command is not run (the first pass was it).
"""

from __future__ import annotations

import os
import subprocess
import sys

from cpu_kernels import build


def lower_path_env(variant: str | None, kernel_dir: str) -> dict[str, str] | None:
    """The environment that takes the path below `variant` (the one that loads here; None:
    torch's kernels), with the AMX-masked build kept in a folder beside `kernel_dir`."""
    if variant == "amx":
        return {"HEADSTART_KERNELS": "avx512", "HEADSTART_KERNEL_DIR": kernel_dir + "-avx512"}
    if variant == "avx512":
        return {"HEADSTART_KERNELS": "0"}
    return None


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m cpu_kernels.lower_path COMMAND [ARG ...]", file=sys.stderr)
        return 2
    module = build.kernels()
    extra = lower_path_env(None if module is None else module.variant, str(build.build_dir()))
    if extra is None:
        print(f"[lower path] this machine already runs {build.kernel_path()}: nothing lower")
        return 0
    env = {**os.environ, **extra}
    if extra["HEADSTART_KERNELS"] != "0":  # the masked variant is built (and tried) first
        subprocess.run([sys.executable, "-m", "cpu_kernels.build"], env=env, check=True,
                       stdout=subprocess.DEVNULL)
    below = subprocess.run([sys.executable, "-c", "from cpu_kernels.build import kernel_path;"
                            " print(kernel_path())"], env=env, capture_output=True, text=True)
    described = " ".join(f"{k}={v}" for k, v in extra.items())
    print(f"[lower path] {build.kernel_path()} here; {described}: {below.stdout.strip()}",
          flush=True)
    return subprocess.run(argv, env=env).returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
