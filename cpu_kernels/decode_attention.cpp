// Decode attention straight over the paged KV cache: one query per sequence.
//
// The torch path writes the new K/V with two index_copy_ calls, gathers every sequence's
// context into a padded batch and runs SDPA: four calls and a copy of the whole context
// per layer, which at batch 1 cost more than the attention itself. This kernel writes the
// new K/V, then for each (sequence, query head) reads the keys and values in place through
// the block table: scores and softmax in fp32, output rounded to bf16 once.

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels.h"
#include "paged_cache.h"
#include "simd.h"

namespace headstart {
namespace {

struct PagedContext {
  const c10::BFloat16* keys;    // K plane of one layer's cache, at the wanted kv head
  const c10::BFloat16* values;  // V plane, same
  const int64_t* blocks;        // the sequence's block table
  int64_t length;               // positions in context, the new token included
  int64_t block_size;
  int64_t token_stride;         // elements from one cache slot to the next

  int64_t offset(int64_t t) const {
    return (blocks[t / block_size] * block_size + t % block_size) * token_stride;
  }
};

// softmax(q . K^T * scale) . V for one query head; `scores` has room for the context.
void attend(const c10::BFloat16* q, const PagedContext& ctx, int64_t D, float scale,
            float* scores, c10::BFloat16* out) {
  const int64_t chunks = D / 32, lanes = D / 16;
  __m512bh qv[8];  // head_dim <= 256
  for (int64_t c = 0; c < chunks; ++c) qv[c] = (__m512bh)_mm512_loadu_si512(q + c * 32);
  float top = -INFINITY;
  for (int64_t t = 0; t < ctx.length; ++t) {
    const c10::BFloat16* k = ctx.keys + ctx.offset(t);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t c = 0; c < chunks; ++c)
      acc = _mm512_dpbf16_ps(acc, qv[c], (__m512bh)_mm512_loadu_si512(k + c * 32));
    scores[t] = _mm512_reduce_add_ps(acc) * scale;
    top = std::max(top, scores[t]);
  }
  __m512 total = _mm512_setzero_ps();
  for (int64_t t = 0; t < ctx.length; t += 16) {
    const __mmask16 live = ctx.length - t >= 16 ? 0xFFFF : (1u << (ctx.length - t)) - 1;
    const __m512 s = _mm512_maskz_loadu_ps(live, scores + t);
    const __m512 p = _mm512_maskz_mov_ps(live, simd::exp(_mm512_sub_ps(s, _mm512_set1_ps(top))));
    _mm512_mask_storeu_ps(scores + t, live, p);
    total = _mm512_add_ps(total, p);
  }
  __m512 acc[16];  // head_dim <= 256, 16 floats each
  for (int64_t c = 0; c < lanes; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t t = 0; t < ctx.length; ++t) {
    const c10::BFloat16* v = ctx.values + ctx.offset(t);
    const __m512 p = _mm512_set1_ps(scores[t]);
    for (int64_t c = 0; c < lanes; ++c)
      acc[c] = _mm512_fmadd_ps(p, simd::load_bf16(v + c * 16), acc[c]);
  }
  const __m512 inv = _mm512_set1_ps(1.f / _mm512_reduce_add_ps(total));
  for (int64_t c = 0; c < lanes; ++c) simd::store_bf16(out + c * 16, _mm512_mul_ps(acc[c], inv));
}

}  // namespace

at::Tensor paged_decode_attention(const at::Tensor& q, const at::Tensor& k,
                                  const at::Tensor& v, at::Tensor& cache,
                                  const at::Tensor& slots, const at::Tensor& tables,
                                  const at::Tensor& context_lens, double scale) {
  check_qkv_cache(q, k, v, cache);
  const int64_t B = q.size(0), Hq = q.size(1), D = q.size(2);
  const int64_t num_blocks = cache.size(1), block_size = cache.size(2), Hkv = cache.size(3);
  TORCH_CHECK(slots.scalar_type() == at::kLong && tables.scalar_type() == at::kLong &&
                  context_lens.scalar_type() == at::kLong && slots.numel() == B &&
                  context_lens.numel() == B && tables.dim() == 2 && tables.size(0) == B &&
                  slots.is_contiguous() && tables.is_contiguous() && context_lens.is_contiguous(),
              "slots [B], tables [B, blocks] and context_lens [B] must be contiguous int64");
  const int64_t token_stride = Hkv * D;
  const int64_t plane = num_blocks * block_size * token_stride;  // K plane -> V plane
  const int64_t* slot = slots.data_ptr<int64_t>();
  const int64_t* lens = context_lens.data_ptr<int64_t>();
  const int64_t* table = tables.data_ptr<int64_t>();
  int64_t longest = 0;
  for (int64_t b = 0; b < B; ++b) {  // checked before anything is written
    TORCH_CHECK(slot[b] >= 0 && slot[b] < num_blocks * block_size, "slot out of range");
    TORCH_CHECK(lens[b] >= 1 && lens[b] <= tables.size(1) * block_size, "bad context length");
    for (int64_t i = 0; i < (lens[b] + block_size - 1) / block_size; ++i)
      TORCH_CHECK(table[b * tables.size(1) + i] >= 0 &&
                      table[b * tables.size(1) + i] < num_blocks,
                  "block id out of range");
    longest = std::max(longest, lens[b]);
  }
  write_kv(cache, k, v, slot);  // the new tokens' K and V into their slots
  const auto* kc = cache.data_ptr<c10::BFloat16>();
  at::Tensor out = at::empty({B, Hq, D}, q.options());
  const auto* qp = q.data_ptr<c10::BFloat16>();
  auto* op = out.data_ptr<c10::BFloat16>();
  const int64_t group = Hq / Hkv;
  at::parallel_for(0, B * Hq, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> scores(longest);
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t b = task / Hq, h = task % Hq, kv = h / group;
      const PagedContext ctx{kc + kv * D, kc + plane + kv * D, table + b * tables.size(1),
                             lens[b], block_size, token_stride};
      attend(qp + b * q.stride(0) + h * q.stride(1), ctx, D, static_cast<float>(scale),
             scores.data(), op + (b * Hq + h) * D);
    }
  });
  return out;
}

}  // namespace headstart
