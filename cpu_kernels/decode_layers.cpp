// Every decoder layer of one decode step in one call: the same kernels, in the same order,
// as LlamaModel.forward's Python path takes for a decode-only step on the CPU, without the
// interpreter between them. Both variants: the linears are AMX or VNNI blocks.
//
// At batch 1 the Python path issues ~15 calls per layer, each a few microseconds of
// interpreter and module dispatch: about a third of the step. The layer logic stays in
// engine/model.py; this is its decode specialisation (tests/engine/test_decode_kernels.py
// checks that both give bit-identical hidden states). A step of worse priority classes may
// stop between layers when a better request arrives, as the Python path does.

#include <ATen/ATen.h>

#include "kernels.h"

namespace headstart {
namespace {

// The per-layer tensors, in the order engine/model.py's `decode_layer_weights` lists them.
enum Slot : int64_t {
  kInputNorm, kPostNorm, kQkvBias,
  kQkvInt4, kQkvInt4Scales, kQkvCodes, kQkvScales, kQkvOffsets,
  kOInt4, kOInt4Scales, kOCodes, kOScales, kOOffsets,
  kGateUpInt4, kGateUpInt4Scales, kGateUpCodes, kGateUpScales, kGateUpOffsets,
  kDownInt4, kDownInt4Scales, kDownCodes, kDownScales, kDownOffsets,
  kSlotsPerLayer
};

// x @ W.T, with AMX by torch's int4 kernel for up to `int4_rows` rows (bf16), else by the
// AMX blocks; without AMX by the VNNI blocks (in the codes' slot). In float32 for the
// linears whose outputs go to a float32 consumer (`float_out`: o_proj and down_proj into
// the residual stream, gate_up_proj into the SiLU), as engine/weights/decode_copies.py gives
// their copies.
at::Tensor linear(const at::Tensor& x, const std::vector<at::Tensor>& w, int64_t base,
                  int64_t first, int64_t int4_rows, bool float_out) {
  const int64_t at = base + first;
#ifdef HEADSTART_AMX
  if (x.size(0) <= int4_rows)
    return at::_weight_int4pack_mm_for_cpu(x, w[at], 32, w[at + 1]);
  return q4_matmul(x, w[at + 2], w[at + 3], w[at + 4], float_out);
#else
  const int64_t outputs = w[at + 2].numel() / kVnniQ4BlockBytes * 16 / (x.size(1) / 32);
  return q4_vnni_matmul(x, w[at + 2], outputs, float_out);
#endif
}

}  // namespace

at::Tensor decode_layers(const at::Tensor& embedded, const std::vector<at::Tensor>& w,
                         const at::Tensor& final_norm, double eps, const at::Tensor& cos,
                         const at::Tensor& sin, const at::Tensor& kv_cache,
                         const at::Tensor& slots, const at::Tensor& tables,
                         const at::Tensor& context_lens, double scale, int64_t num_heads,
                         int64_t num_kv_heads, int64_t int4_rows, const at::Tensor& arrival,
                         int64_t cut_below) {
  const int64_t layers = kv_cache.size(0);
  TORCH_CHECK(static_cast<int64_t>(w.size()) == layers * kSlotsPerLayer,
              "expected ", kSlotsPerLayer, " tensors per layer");
  const int64_t T = embedded.size(0), D = kv_cache.size(-1);
  const int64_t q_size = num_heads * D, kv_size = num_kv_heads * D;
  TORCH_CHECK(embedded.is_contiguous(), "the embeddings must be contiguous");
  // the residual stream, float32 as in engine/model.py, added to in place
  at::Tensor residual = embedded.to(at::kFloat);
  at::Tensor h = rms_norm(embedded, w[kInputNorm], eps);
  at::Tensor mlp_out;
  // the best priority that arrived since the step began, written by another thread (the
  // binding releases the GIL): below `cut_below`, the step stops before its next layer
  const volatile int32_t* arrived = arrival.data_ptr<int32_t>();
  for (int64_t l = 0; l < layers; ++l) {
    if (l > 0 && *arrived < cut_below) return at::Tensor();  // None: StepInterrupted
    const int64_t base = l * kSlotsPerLayer;
    if (l > 0) h = add_rms_norm_(residual, mlp_out, w[base + kInputNorm], eps);
    at::Tensor qkv = linear(h, w, base, kQkvInt4, int4_rows, false);
    if (w[base + kQkvBias].defined() && w[base + kQkvBias].numel() > 0)
      qkv = qkv + w[base + kQkvBias];
    at::Tensor qk = qkv.narrow(1, 0, q_size + kv_size).view({T, num_heads + num_kv_heads, D});
    rope_(qk, cos, sin);
    const at::Tensor q = qk.narrow(1, 0, num_heads);
    const at::Tensor k = qk.narrow(1, num_heads, num_kv_heads);
    const at::Tensor v = qkv.narrow(1, q_size + kv_size, kv_size).view({T, num_kv_heads, D});
    at::Tensor layer_cache = kv_cache.select(0, l);
    const at::Tensor attn = paged_decode_attention(q, k, v, layer_cache, slots, tables,
                                                   context_lens, scale);
    const at::Tensor o = linear(attn.view({T, q_size}), w, base, kOInt4, int4_rows, true);
    h = add_rms_norm_(residual, o, w[base + kPostNorm], eps);
    const at::Tensor gate_up = linear(h, w, base, kGateUpInt4, int4_rows, true);
    mlp_out = linear(silu_mul(gate_up), w, base, kDownInt4, int4_rows, true);
  }
  return add_rms_norm_(residual, mlp_out, final_norm, eps);
}

}  // namespace headstart
