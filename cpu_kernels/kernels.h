// The engine's CPU kernels, bound to Python in module.cpp (see cpu_kernels/build.py).
#pragma once

#include <ATen/ATen.h>

#include <tuple>

namespace headstart {

constexpr int kGroupQuantMaxRows = 16;

// Built only in the "amx" variant (cpu_kernels/build.py, -DHEADSTART_AMX):
// group_quant_matmul.cpp: x [M <= 16, K] bf16 times W.T, W in AMX tile blocks
// (cpu_kernels/amx_blocks.py) of Q4_1 codes + scales + offsets, or Q8_0 codes + scales;
// the result in bf16, or in float32 with `float_out` (the LM head's logits).
at::Tensor q4_matmul(const at::Tensor& x, const at::Tensor& codes,
                     const at::Tensor& scales, const at::Tensor& offsets,
                     bool float_out = false);
at::Tensor q8_matmul(const at::Tensor& x, const at::Tensor& codes,
                     const at::Tensor& scales, bool float_out = false);
// Asks Linux for AMX tile state (once per process); false if refused.
bool request_amx();

// Built only in the "avx512" variant (AVX-512 VNNI, no AMX):
constexpr int64_t kVnniQ4BlockBytes = 320;  // a Q4 block of 16 columns x 32 inputs
// vnni_matmul.cpp: x [M <= 16, K] bf16 times W.T, W in blocks of 16 columns x 32 inputs
// (cpu_kernels/vnni_blocks.py) of Q4_0/Q4_1 or Q8_0 codes with fp16 scales; `n` outputs,
// in bf16, or in float32 with `float_out`.
at::Tensor q4_vnni_matmul(const at::Tensor& x, const at::Tensor& blocks, int64_t n,
                          bool float_out = false);
at::Tensor q8_vnni_matmul(const at::Tensor& x, const at::Tensor& blocks, int64_t n,
                          bool float_out = false);

// Every variant (AVX-512 BF16):
// decode_ops.cpp: a decoder layer's elementwise steps for bf16 [T, H] rows.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);
// x += delta (in place), then rms_norm(x) in bf16; x is bf16 or a float32 residual stream
// (to which delta may also be float32).
at::Tensor add_rms_norm_(at::Tensor& x, const at::Tensor& delta,
                         const at::Tensor& weight, double eps);
// qk [T, heads, head_dim] rotated in place; cos, sin [T, 1, head_dim] (sin's sign folded).
void rope_(at::Tensor& qk, const at::Tensor& cos, const at::Tensor& sin);
// silu(gate) * up for gate_up [T, 2I] (bf16 or float32) -> bf16 [T, I].
at::Tensor silu_mul(const at::Tensor& gate_up);

// decode_attention.cpp: writes k, v [B, kv_heads, D] at `slots` of one layer's cache
// [2, blocks, block_size, kv_heads, D], then attends q [B, heads, D] (one query per
// sequence) over each sequence's context_lens[b] positions through tables [B, max_blocks].
at::Tensor paged_decode_attention(const at::Tensor& q, const at::Tensor& k,
                                  const at::Tensor& v, at::Tensor& cache,
                                  const at::Tensor& slots, const at::Tensor& tables,
                                  const at::Tensor& context_lens, double scale);

// prefill_attention.cpp: writes k, v [L, kv_heads, D] of one sequence's chunk at `slots`,
// then attends q [L, heads, D] (positions start..start+L-1) causally over positions
// [0, start + L) of the sequence, read through its block `table` [blocks] int64.
at::Tensor paged_prefill_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   at::Tensor& cache, const at::Tensor& slots,
                                   const at::Tensor& table, int64_t start, double scale);

// decode_layers.cpp: all decoder layers of a decode-only step; `w` holds each layer's
// tensors (engine/weights/decode_layer_weights.py); the residual stream
// starts as a float32 copy of `embedded` [T, H]. Returns the final norm's output [T, H], or
// an undefined tensor when `arrival[0]` (int32, written by another thread) fell below
// `cut_below` before a layer past the first.
at::Tensor decode_layers(const at::Tensor& embedded, const std::vector<at::Tensor>& w,
                         const at::Tensor& final_norm, double eps, const at::Tensor& cos,
                         const at::Tensor& sin, const at::Tensor& kv_cache,
                         const at::Tensor& slots, const at::Tensor& tables,
                         const at::Tensor& context_lens, double scale, int64_t num_heads,
                         int64_t num_kv_heads, int64_t int4_rows, const at::Tensor& arrival,
                         int64_t cut_below);

// int8_linear.cpp: x [M, K] bf16 @ W.T for int8 W given as its [K, N] transposed view, one
// float scale per output; x * smooth (float [K], optional) is quantised per row on the fly;
// the input channels `outlier_cols` (int64 [k], k <= 64; smooth 0 there) are added in float
// with their weights `outlier_weight` (float [k, N]).
// quantize_rows: (int8 [M, K], float scales [M]) with x * smooth ~= q * scale.
at::Tensor int8_linear(const at::Tensor& x, const at::Tensor& weight_t,
                       const at::Tensor& weight_scales, const c10::optional<at::Tensor>& bias,
                       const c10::optional<at::Tensor>& smooth,
                       const c10::optional<at::Tensor>& outlier_cols,
                       const c10::optional<at::Tensor>& outlier_weight);
std::tuple<at::Tensor, at::Tensor> quantize_rows(const at::Tensor& x,
                                                 const c10::optional<at::Tensor>& smooth);

}  // namespace headstart
