// The engine's CPU kernels, bound to Python in module.cpp (see engine/kernels/build.py).
#pragma once

#include <ATen/ATen.h>

namespace headstart {

constexpr int kGroupQuantMaxRows = 16;

// group_quant_matmul.cpp: x [M <= 16, K] bf16 times W.T, W in AMX tile blocks
// (engine/weights/amx_blocks.py) of Q4_1 codes + scales + offsets, or Q8_0 codes + scales.
at::Tensor q4_matmul(const at::Tensor& x, const at::Tensor& codes,
                     const at::Tensor& scales, const at::Tensor& offsets);
at::Tensor q8_matmul(const at::Tensor& x, const at::Tensor& codes,
                     const at::Tensor& scales);
// Asks Linux for AMX tile state (once per process); false if refused.
bool request_amx();

// decode_ops.cpp: a decoder layer's elementwise steps for bf16 [T, H] rows.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);
// x += delta (in place), then rms_norm(x).
at::Tensor add_rms_norm_(at::Tensor& x, const at::Tensor& delta,
                         const at::Tensor& weight, double eps);
// qk [T, heads, head_dim] rotated in place; cos, sin [T, 1, head_dim] (sin's sign folded).
void rope_(at::Tensor& qk, const at::Tensor& cos, const at::Tensor& sin);
// silu(gate) * up for gate_up [T, 2I] -> [T, I].
at::Tensor silu_mul(const at::Tensor& gate_up);

// decode_attention.cpp: writes k, v [B, kv_heads, D] at `slots` of one layer's cache
// [2, blocks, block_size, kv_heads, D], then attends q [B, heads, D] (one query per
// sequence) over each sequence's context_lens[b] positions through tables [B, max_blocks].
at::Tensor paged_decode_attention(const at::Tensor& q, const at::Tensor& k,
                                  const at::Tensor& v, at::Tensor& cache,
                                  const at::Tensor& slots, const at::Tensor& tables,
                                  const at::Tensor& context_lens, double scale);

// decode_layers.cpp: all decoder layers of a decode-only step; `w` holds each layer's
// tensors (engine/model.py `LlamaModel.decode_layer_weights`), `embedded` [T, H] becomes
// the residual stream (written in place). Returns the final norm's output [T, H].
at::Tensor decode_layers(const at::Tensor& embedded, const std::vector<at::Tensor>& w,
                         const at::Tensor& final_norm, double eps, const at::Tensor& cos,
                         const at::Tensor& sin, const at::Tensor& kv_cache,
                         const at::Tensor& slots, const at::Tensor& tables,
                         const at::Tensor& context_lens, double scale, int64_t num_heads,
                         int64_t num_kv_heads, int64_t int4_rows);

}  // namespace headstart
