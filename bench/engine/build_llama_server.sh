#!/usr/bin/env bash
# Build llama.cpp's `llama-server` (benchmarks only: `make install-bench`) from the llama.cpp
# sources that ship inside the llama-cpp-python source distribution on PyPI: CMake, the server
# target alone, static, no curl/OpenSSL/web UI downloads. Instruction sets follow this CPU's
# flags; AMX only where asked (HEADSTART_LLAMA_AMX=1): some VMs advertise AMX but kill a
# process that uses it.
#   bench/engine/build_llama_server.sh OUT_BINARY [PYTHON]
set -euo pipefail
out=$1
python=${2:-python3}
version=0.3.36
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$work"
tar xzf "$work/llama_cpp_python-$version.tar.gz" -C "$work"
src="$work/llama_cpp_python-$version/vendor/llama.cpp"
flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
has() { [[ "$flags" == *" $1 "* ]]; }
on() { if has "$1"; then echo ON; else echo OFF; fi; }
avx512=OFF
if has avx512f && has avx512bw && has avx512vl && has avx512dq && has avx512cd; then avx512=ON; fi
amx=OFF
if [ "${HEADSTART_LLAMA_AMX:-0}" = 1 ] && has amx_tile && has amx_int8; then amx=ON; fi
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DGGML_NATIVE=OFF -DGGML_OPENMP=ON \
  -DGGML_AVX="$(on avx)" -DGGML_AVX2="$(on avx2)" -DGGML_FMA="$(on fma)" -DGGML_F16C="$(on f16c)" \
  -DGGML_AVX512="$avx512" -DGGML_AVX512_VNNI="$(on avx512_vnni)" \
  -DGGML_AVX512_BF16="$(on avx512_bf16)" \
  -DGGML_AMX_TILE="$amx" -DGGML_AMX_INT8="$amx" -DGGML_AMX_BF16="$amx" \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF >/dev/null
cmake --build "$work/build" --target llama-server -j "$(nproc)" >/dev/null
mkdir -p "$(dirname "$out")"
cp "$work/build/bin/llama-server" "$out"
"$out" --version 2>&1 | head -2
