// The engine's CPU kernels, bound to Python in module.cpp (see engine/kernels/build.py).
#pragma once

#include <torch/extension.h>

namespace headstart {

constexpr int kGroupQuantMaxRows = 16;

// group_quant_matmul.cpp: x [M <= 16, K] bf16 times W.T, W in AMX tile blocks
// (engine/weights/amx_blocks.py) of Q4_1 codes + scales + offsets, or Q8_0 codes + scales.
torch::Tensor q4_matmul(const torch::Tensor& x, const torch::Tensor& codes,
                        const torch::Tensor& scales, const torch::Tensor& offsets);
torch::Tensor q8_matmul(const torch::Tensor& x, const torch::Tensor& codes,
                        const torch::Tensor& scales);
// Asks Linux for AMX tile state (once per process); false if refused.
bool request_amx();

// decode_ops.cpp: a decoder layer's elementwise steps for bf16 [T, H] rows.
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);
// x += delta (in place), then rms_norm(x).
torch::Tensor add_rms_norm_(torch::Tensor& x, const torch::Tensor& delta,
                            const torch::Tensor& weight, double eps);
// qk [T, heads, head_dim] rotated in place; cos, sin [T, 1, head_dim] (sin's sign folded).
void rope_(torch::Tensor& qk, const torch::Tensor& cos, const torch::Tensor& sin);
// silu(gate) * up for gate_up [T, 2I] -> [T, I].
torch::Tensor silu_mul(const torch::Tensor& gate_up);

// decode_attention.cpp: writes k, v [B, kv_heads, D] at `slots` of one layer's cache
// [2, blocks, block_size, kv_heads, D], then attends q [B, heads, D] (one query per
// sequence) over each sequence's context_lens[b] positions through tables [B, max_blocks].
torch::Tensor paged_decode_attention(const torch::Tensor& q, const torch::Tensor& k,
                                     const torch::Tensor& v, torch::Tensor& cache,
                                     const torch::Tensor& slots, const torch::Tensor& tables,
                                     const torch::Tensor& context_lens, double scale);

// decode_layers.cpp: all decoder layers of a decode-only step; `w` holds each layer's
// tensors (engine/model.py `LlamaModel.decode_layer_weights`), `embedded` [T, H] becomes
// the residual stream (written in place). Returns the final norm's output [T, H].
torch::Tensor decode_layers(const torch::Tensor& embedded, const std::vector<torch::Tensor>& w,
                            const torch::Tensor& final_norm, double eps, const torch::Tensor& cos,
                            const torch::Tensor& sin, const torch::Tensor& kv_cache,
                            const torch::Tensor& slots, const torch::Tensor& tables,
                            const torch::Tensor& context_lens, double scale, int64_t num_heads,
                            int64_t num_kv_heads, int64_t int4_rows);

}  // namespace headstart
