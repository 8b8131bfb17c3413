// Causal attention of one sequence's prefill chunk straight over the paged KV cache,
// flash-style: scores live in registers 32 keys at a time, never as an [L, context] matrix.
//
// torch's CPU SDPA runs a 512-query chunk over 2,048 keys at ~55 GFLOP/s a thread here (Zen 4,
// whose vdpbf16ps peaks at ~230), and a chunk that continues a cached prompt first needs its
// context gathered and a mask built. This kernel writes the chunk's K/V into the cache, packs
// each 32-key tile once per call into AVX-512 BF16 dot-product order, then for each (kv head,
// block of 16 positions) runs the online softmax for the query heads of that kv head, four
// query rows at a time so that every key and value load serves four rows: q.k and p.v are
// vdpbf16ps products (bf16 pairs, fp32 sums), the softmax in fp32 base 2 (the scale times
// log2(e) folded into one multiply), p rounded to bf16 for p.v (as flash attention does), the
// output rounded to bf16 once. `bench/engine/attention_bench.py` times it against SDPA.
//
// Three things keep the softmax off the critical path (at head_dim 64 a row spends only 128
// dot products on each 32 keys, so every other instruction counts):
// - the running max may lag: a row rescales its sum and output only when a score exceeds its
//   max by 2^8 (then to the new exact max), as FlashAttention-4 does; p <= 256 is harmless in
//   fp32 sums, and the normalisation divides it out exactly;
// - so no horizontal max per tile: one compare of the scores against max + 8 (a mask test);
// - the row sum stays a vector until the end.
//
// Packed layouts, per kv head and tile of 32 keys (pairs are two bf16 in one 32-bit word):
//   keys   [D/2][32]: word (i, t) = (K[t][2i], K[t][2i+1]); two zmm per i hold 32 keys
//   values [16][D]:   word (p, d) = (V[2p][d], V[2p+1][d]); one zmm per (p, 16 dims)

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

constexpr int64_t kTile = 32;       // keys per packed tile: two zmm of fp32 scores per row
constexpr int64_t kPairs = kTile / 2;
constexpr int64_t kQueryBlock = 16; // positions per task
constexpr int kRowBlock = 4;        // query rows sharing each key and value load
constexpr float kLog2e = 1.44269504f;
constexpr float kRescaleAbove = 8.f;  // log2 units a score may exceed the kept max by

struct Packed {
  const uint32_t* keys;    // [Hkv][tiles][D/2][32]
  const uint32_t* values;  // [Hkv][tiles][16][D]
  int64_t tiles, D;

  const uint32_t* key_tile(int64_t h, int64_t t) const {
    return keys + (h * tiles + t) * (D / 2) * kTile;
  }
  const uint32_t* value_tile(int64_t h, int64_t t) const {
    return values + (h * tiles + t) * kPairs * D;
  }
};

// One query row's running softmax state and output accumulator.
struct Row {
  const uint32_t* q;  // the query's D/2 pairs
  int64_t pos;        // its position: keys 0..pos are visible
  float max;          // the kept max of its scores * scale * log2(e) (base-2 logits)
  __m512 sum;         // the sum of p = 2^(logit - max), 16 partial sums
  float* acc;         // D floats: sum of p * v
};

// Rows [0, RB) against key tile t: scores, online softmax, p.v into each row's acc, CG chunks
// of 16 dims at a time (CG * RB accumulators in registers).
template <int RB, int CG>
void tile_step(Row* rows, const Packed& kv, int64_t h, int64_t t, float log2_scale) {
  const int64_t D = kv.D;
  const uint32_t* kt = kv.key_tile(h, t);
  __m512 s[RB][2];
  for (int r = 0; r < RB; ++r) s[r][0] = s[r][1] = _mm512_setzero_ps();
  for (int64_t i = 0; i < D / 2; ++i) {
    const __m512bh k0 = (__m512bh)_mm512_loadu_si512(kt + i * kTile);
    const __m512bh k1 = (__m512bh)_mm512_loadu_si512(kt + i * kTile + 16);
    for (int r = 0; r < RB; ++r) {
      const __m512bh q = (__m512bh)_mm512_set1_epi32(rows[r].q[i]);
      s[r][0] = _mm512_dpbf16_ps(s[r][0], k0, q);
      s[r][1] = _mm512_dpbf16_ps(s[r][1], k1, q);
    }
  }
  const __m512 ninf = _mm512_set1_ps(-INFINITY), ls = _mm512_set1_ps(log2_scale);
  const __m512 above = _mm512_set1_ps(kRescaleAbove);
  const __m512bh ones = (__m512bh)_mm512_set1_epi16(0x3F80);  // bf16 1.0 in every half
  alignas(64) uint32_t pairs[RB][kPairs];  // each row's p as bf16 pairs of keys
  for (int r = 0; r < RB; ++r) {
    Row& row = rows[r];
    const int64_t visible = row.pos - t * kTile;  // lanes 0..visible see their key (>= 0)
    __mmask16 m0 = 0xFFFF, m1 = 0xFFFF;
    if (visible < kTile - 1) {
      const uint32_t seen = (2u << visible) - 1;
      m0 = static_cast<__mmask16>(seen), m1 = static_cast<__mmask16>(seen >> 16);
    }
    __m512 y0 = _mm512_mask_mov_ps(ninf, m0, _mm512_fmsub_ps(s[r][0], ls, _mm512_set1_ps(row.max)));
    __m512 y1 = _mm512_mask_mov_ps(ninf, m1, _mm512_fmsub_ps(s[r][1], ls, _mm512_set1_ps(row.max)));
    if (_mm512_cmp_ps_mask(y0, above, _CMP_GT_OQ) | _mm512_cmp_ps_mask(y1, above, _CMP_GT_OQ)) {
      // a new max (always on a row's first tile): rescale what the row has so far
      const __m512 l0 = _mm512_mask_mov_ps(ninf, m0, _mm512_mul_ps(s[r][0], ls));
      const __m512 l1 = _mm512_mask_mov_ps(ninf, m1, _mm512_mul_ps(s[r][1], ls));
      const float top = _mm512_reduce_max_ps(_mm512_max_ps(l0, l1));
      const __m512 alpha = _mm512_set1_ps(std::exp2(row.max - top));  // 0 on the first tile
      row.sum = _mm512_mul_ps(row.sum, alpha);
      for (int64_t c = 0; c < D; c += 16)
        _mm512_storeu_ps(row.acc + c, _mm512_mul_ps(_mm512_loadu_ps(row.acc + c), alpha));
      row.max = top;
      y0 = _mm512_sub_ps(l0, _mm512_set1_ps(top));
      y1 = _mm512_sub_ps(l1, _mm512_set1_ps(top));
    }
    __m512 p0 = simd::exp2(y0), p1 = simd::exp2(y1);
    if (visible < kTile - 1) {  // hidden lanes: exactly 0, not 2^-126
      p0 = _mm512_maskz_mov_ps(m0, p0);
      p1 = _mm512_maskz_mov_ps(m1, p1);
    }
    // the sum of p as rounded for p.v, so that a row's weights add up to exactly 1
    const __m512bh rounded = _mm512_cvtne2ps_pbh(p1, p0);
    row.sum = _mm512_dpbf16_ps(row.sum, rounded, ones);
    _mm512_store_si512(pairs[r], (__m512i)rounded);
  }
  // p.v, 16 * CG dims at a time: each value pair is loaded once for all RB rows
  const uint32_t* vt = kv.value_tile(h, t);
  for (int64_t c = 0; c < D; c += 16 * CG) {
    __m512 o[RB][CG];
    for (int r = 0; r < RB; ++r)
      for (int g = 0; g < CG; ++g) o[r][g] = _mm512_loadu_ps(rows[r].acc + c + 16 * g);
    for (int64_t j = 0; j < kPairs; ++j) {
      __m512bh v[CG];
      for (int g = 0; g < CG; ++g) v[g] = (__m512bh)_mm512_loadu_si512(vt + j * D + c + 16 * g);
      for (int r = 0; r < RB; ++r) {
        const __m512bh p = (__m512bh)_mm512_set1_epi32(pairs[r][j]);
        for (int g = 0; g < CG; ++g) o[r][g] = _mm512_dpbf16_ps(o[r][g], v[g], p);
      }
    }
    for (int r = 0; r < RB; ++r)
      for (int g = 0; g < CG; ++g) _mm512_storeu_ps(rows[r].acc + c + 16 * g, o[r][g]);
  }
}

// Rows [0, n) (n <= kRowBlock) over every tile they can see, from the first.
template <int CG>
void attend_rows(Row* rows, int n, const Packed& kv, int64_t h, float log2_scale) {
  int64_t last = 0;
  for (int r = 0; r < n; ++r) last = std::max(last, rows[r].pos / kTile);
  for (int64_t t = 0; t <= last; ++t) {
    // rows whose position is below this tile see none of it: keep them out of the step
    Row* live[kRowBlock];
    int m = 0;
    for (int r = 0; r < n; ++r)
      if (rows[r].pos >= t * kTile) live[m++] = &rows[r];
    if (m == n) {  // every row (all but the last tiles of a block)
      switch (m) {
        case 4: tile_step<4, CG>(rows, kv, h, t, log2_scale); continue;
        case 3: tile_step<3, CG>(rows, kv, h, t, log2_scale); continue;
        case 2: tile_step<2, CG>(rows, kv, h, t, log2_scale); continue;
        case 1: tile_step<1, CG>(rows, kv, h, t, log2_scale); continue;
        default: continue;
      }
    }
    Row block[kRowBlock];
    for (int r = 0; r < m; ++r) block[r] = *live[r];
    switch (m) {
      case 3: tile_step<3, CG>(block, kv, h, t, log2_scale); break;
      case 2: tile_step<2, CG>(block, kv, h, t, log2_scale); break;
      case 1: tile_step<1, CG>(block, kv, h, t, log2_scale); break;
      default: break;
    }
    for (int r = 0; r < m; ++r) *live[r] = block[r];
  }
}

// Keys and values of positions [0, context) of kv head h into the packed tile t (zeros past
// the context, so that masked lanes multiply zeros, never stale memory).
void pack_tile(const c10::BFloat16* cache, int64_t plane, const int64_t* table,
               int64_t block_size, int64_t token_stride, int64_t context, int64_t h,
               int64_t t, const Packed& kv, uint32_t* keys, uint32_t* values) {
  const int64_t D = kv.D;
  std::memset(keys, 0, D / 2 * kTile * sizeof(uint32_t));
  std::memset(values, 0, kPairs * D * sizeof(uint32_t));
  auto* vhalves = reinterpret_cast<uint16_t*>(values);
  for (int64_t i = 0; i < kTile && t * kTile + i < context; ++i) {
    const int64_t pos = t * kTile + i;
    const int64_t at = (table[pos / block_size] * block_size + pos % block_size) * token_stride +
                       h * D;
    const auto* k = reinterpret_cast<const uint32_t*>(cache + at);
    for (int64_t w = 0; w < D / 2; ++w) keys[w * kTile + i] = k[w];
    const auto* v = reinterpret_cast<const uint16_t*>(cache + plane + at);
    for (int64_t d = 0; d < D; ++d) vhalves[2 * ((i / 2) * D + d) + i % 2] = v[d];
  }
}

}  // namespace

at::Tensor paged_prefill_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   at::Tensor& cache, const at::Tensor& slots,
                                   const at::Tensor& table, int64_t start, double scale) {
  check_qkv_cache(q, k, v, cache);
  const int64_t L = q.size(0), Hq = q.size(1), D = q.size(2);
  const int64_t num_blocks = cache.size(1), block_size = cache.size(2), Hkv = cache.size(3);
  TORCH_CHECK(q.stride(1) % 2 == 0 && q.stride(0) % 2 == 0, "q rows must start on bf16 pairs");
  const int64_t context = start + L;
  TORCH_CHECK(start >= 0 && L >= 1, "bad chunk start or length");
  TORCH_CHECK(slots.scalar_type() == at::kLong && table.scalar_type() == at::kLong &&
                  slots.numel() == L && slots.is_contiguous() && table.dim() == 1 &&
                  table.is_contiguous() && table.numel() * block_size >= context,
              "slots [L] and the block table [blocks >= context / block_size] must be int64");
  const int64_t* slot = slots.data_ptr<int64_t>();
  const int64_t* blocks = table.data_ptr<int64_t>();
  for (int64_t i = 0; i < L; ++i)  // checked before anything is written
    TORCH_CHECK(slot[i] >= 0 && slot[i] < num_blocks * block_size, "slot out of range");
  for (int64_t b = 0; b < (context + block_size - 1) / block_size; ++b)
    TORCH_CHECK(blocks[b] >= 0 && blocks[b] < num_blocks, "block id out of range");

  write_kv(cache, k, v, slot);  // the chunk's K and V into their slots
  const int64_t token_stride = Hkv * D, plane = num_blocks * block_size * token_stride;
  const auto* cp = cache.data_ptr<c10::BFloat16>();

  const int64_t tiles = (context + kTile - 1) / kTile;
  std::vector<uint32_t> keys(Hkv * tiles * (D / 2) * kTile), values(Hkv * tiles * kPairs * D);
  const Packed kv{keys.data(), values.data(), tiles, D};
  at::parallel_for(0, Hkv * tiles, 16, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      const int64_t h = j / tiles, t = j % tiles;
      pack_tile(cp, plane, blocks, block_size, token_stride, context, h, t, kv,
                const_cast<uint32_t*>(kv.key_tile(h, t)), const_cast<uint32_t*>(kv.value_tile(h, t)));
    }
  });

  at::Tensor out = at::empty({L, Hq, D}, q.options());
  const auto* qp = reinterpret_cast<const uint32_t*>(q.data_ptr<c10::BFloat16>());
  auto* op = out.data_ptr<c10::BFloat16>();
  const int64_t group = Hq / Hkv, qblocks = (L + kQueryBlock - 1) / kQueryBlock;
  const float log2_scale = static_cast<float>(scale) * kLog2e;
  const auto attend = D % 64 == 0 ? attend_rows<4> : attend_rows<2>;
  // later blocks see more keys: take them alternately from both ends, so that torch's
  // contiguous split of the task range gives each thread a similar share
  at::parallel_for(0, Hkv * qblocks, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> acc(kRowBlock * D);
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t h = task % Hkv, n = task / Hkv;
      const int64_t qb = n % 2 == 0 ? n / 2 : qblocks - 1 - n / 2;
      const int64_t first = qb * kQueryBlock, last = std::min(L, first + kQueryBlock);
      // rows: (position, query head of this kv head), position-major, kRowBlock at a time
      const int64_t rows = (last - first) * group;
      for (int64_t r0 = 0; r0 < rows; r0 += kRowBlock) {
        Row block[kRowBlock];
        const int n_rows = static_cast<int>(std::min<int64_t>(kRowBlock, rows - r0));
        std::fill(acc.begin(), acc.end(), 0.f);
        for (int r = 0; r < n_rows; ++r) {
          const int64_t i = first + (r0 + r) / group, hq = h * group + (r0 + r) % group;
          block[r] = Row{qp + (i * q.stride(0) + hq * q.stride(1)) / 2, start + i, -INFINITY,
                         _mm512_setzero_ps(), acc.data() + r * D};
        }
        attend(block, n_rows, kv, h, log2_scale);
        for (int r = 0; r < n_rows; ++r) {
          const int64_t i = first + (r0 + r) / group, hq = h * group + (r0 + r) % group;
          const __m512 inv = _mm512_set1_ps(1.f / _mm512_reduce_add_ps(block[r].sum));
          for (int64_t c = 0; c < D; c += 16)
            simd::store_bf16(op + (i * Hq + hq) * D + c,
                             _mm512_mul_ps(_mm512_loadu_ps(block[r].acc + c), inv));
        }
      }
    }
  });
  return out;
}

}  // namespace headstart
