// y = x @ W.T for 1-16 bf16 rows of x against W kept as GGUF's 4- or 8-bit codes in groups of
// 32 (Q4_0/Q4_1, Q8_0), with AVX-512 VNNI: the decode steps of a small model on CPUs without
// AMX.
//
// Why: a decode step reads every weight once. torch's int4 kernel reads the 4-bit codes but
// dequantises them once per 4 rows, and its int8 matmul (`_int_mm`) reads twice the bytes and
// runs a GEMM blocking meant for large M; at 8 rows both cost several times a single row.
// Here the codes are read once per step for all rows, and each row's group of 32 inputs is
// quantised to int8 in two levels (hi, then what hi leaves, lo: ~16 bits against the group's
// largest value), so that vpdpbusd multiplies 16 columns by 4 inputs for a row, once per
// level: W[n][k] = d[n][g] * q[n][k] + m[n][g] gives
//   y[r][n] = sum_g d[n][g] * xs[r][g] * sum_k xq[r][k] * q[n][k] + m[n][g] * xsum[r][g]
// with x[r][k] ~= xs[r][g] * xq[r][k] and xsum = xs[r][g] * sum_k xq[r][k], the sum of the
// quantised group (as llama.cpp's Q8_1 keeps it), not of x itself: both terms then see the
// same x, so the result is xq @ W and its error (xq - x) @ W, where W is centred; with the
// exact sum the error is (xq - x) @ (d q), q in 0..15 not centred: 2.3x larger on SmolLM2.
//
// Layout (made by cpu_kernels/vnni_blocks.py): W is cut into blocks of 16 output columns x
// 32 inputs (one group); a column's blocks follow each other. A block holds its codes as 8
// "quads" (4 inputs each) of 16 columns, in vpdpbusd's order (byte 4c + i of a quad is
// column c, input i), then the 16 columns' d and (Q4) m as fp16:
//   Q4: 4 x 64 bytes, byte j of the p-th packs byte j of quad 2p (low nibble) and of quad
//       2p + 1 (high): one load and two ANDs unpack two quads; then d[16], m[16]: 320 bytes;
//   Q8: 8 x 64 bytes of q + 128 (unsigned for vpdpbusd; the 128 * sum(xq) it adds is taken
//       off), then d[16]: 544 bytes.

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels.h"
#include "simd.h"

namespace headstart {
namespace {

constexpr int kGroup = 32;       // inputs per block: one quantisation group
constexpr int kCols = 16;        // output columns per block: one vector of fp32
constexpr int kQuads = kGroup / 4;
constexpr int kRowsPerPass = 8;  // rows whose accumulators stay in registers at once
constexpr int kPrefetch = 4;     // blocks ahead whose lines are asked for

// Each row of x quantised per group in two int8 levels: x ~= scale * (256 * hi + lo), hi the
// group scaled to +-127 and rounded, lo the rest scaled by 256 and rounded (|lo| <= 128,
// saturated at 127). One level alone (hi) is what llama.cpp's Q8_1 keeps: 8 bits against the
// group's largest value, 5x bf16's rounding error on SmolLM2's activations (0.8% of each
// linear's output against 0.15%), enough to turn greedy answers (bench/engine/
// answer_agreement.py); the second level takes it to ~0.003%, under bf16's, for one more
// vpdpbusd per row and quad (the codes are unpacked once for both).
struct QuantizedRows {
  const int8_t* q;      // [M, K / 4, 2, 4]: per 4 inputs, their hi bytes then their lo bytes
  const float* scale;   // [M, groups]: the group's max / 127 / 256
  const int32_t* qsum;  // [M, groups]: sum of 256 * hi + lo over the group
};

void quantize(const c10::BFloat16* x, int64_t M, int64_t K, int8_t* q, float* scale,
              int32_t* qsum) {
  const int64_t groups = K / kGroup;
  // hi and lo of inputs 4j..4j+3 land in dwords 2j and 2j + 1
  const __m512i spread = _mm512_set_epi32(15, 7, 14, 6, 13, 5, 12, 4, 11, 3, 10, 2, 9, 1, 8, 0);
  for (int64_t r = 0; r < M; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const c10::BFloat16* src = x + r * K + g * kGroup;
      const __m512 a = simd::load_bf16(src), b = simd::load_bf16(src + 16);
      const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
      const float inv = amax > 0.f ? 127.f / amax : 0.f;
      const __m512 vinv = _mm512_set1_ps(inv), v256 = _mm512_set1_ps(256.f);
      const __m512 ta = _mm512_mul_ps(a, vinv), tb = _mm512_mul_ps(b, vinv);
      const __m512 ra = _mm512_roundscale_ps(ta, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m512 rb = _mm512_roundscale_ps(tb, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m512i ha = _mm512_cvtps_epi32(ra), hb = _mm512_cvtps_epi32(rb);
      // t - round(t) is exact; times 256 in [-128, 128]
      const __m512i la = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_sub_ps(ta, ra), v256));
      const __m512i lb = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_sub_ps(tb, rb), v256));
      // bytes: [hi 0..15 | hi 16..31 | lo 0..15 | lo 16..31] as dwords of 4 bytes each
      const __m512i bytes = _mm512_inserti64x4(
          _mm512_castsi256_si512(_mm256_set_m128i(_mm512_cvtsepi32_epi8(hb),
                                                  _mm512_cvtsepi32_epi8(ha))),
          _mm256_set_m128i(_mm512_cvtsepi32_epi8(lb), _mm512_cvtsepi32_epi8(la)), 1);
      _mm512_storeu_si512(q + r * 2 * K + g * 2 * kGroup, _mm512_permutexvar_epi32(spread, bytes));
      const __m512i lo_a = _mm512_max_epi32(_mm512_min_epi32(la, _mm512_set1_epi32(127)),
                                            _mm512_set1_epi32(-128));
      const __m512i lo_b = _mm512_max_epi32(_mm512_min_epi32(lb, _mm512_set1_epi32(127)),
                                            _mm512_set1_epi32(-128));
      scale[r * groups + g] = amax / 127.f / 256.f;
      qsum[r * groups + g] = 256 * _mm512_reduce_add_epi32(_mm512_add_epi32(ha, hb)) +
                             _mm512_reduce_add_epi32(_mm512_add_epi32(lo_a, lo_b));
    }
  }
}

// Q4: quads 2p and 2p + 1 share 64 bytes (low and high nibbles) -> 64 unsigned codes each;
// m per column is an offset.
struct Q4 {
  static constexpr int kBlockBytes = kQuads * 32 + 2 * kCols * 2;
  static_assert(kBlockBytes == kVnniQ4BlockBytes);
  static constexpr bool kOffset = true;
  static inline void pair(const uint8_t* block, int p, __m512i& first, __m512i& second) {
    const __m512i packed = _mm512_loadu_si512(block + p * 64);
    const __m512i nibble = _mm512_set1_epi8(0x0F);
    first = _mm512_and_si512(packed, nibble);
    second = _mm512_and_si512(_mm512_srli_epi16(packed, 4), nibble);
  }
  static inline const uint8_t* scales(const uint8_t* block) { return block + kQuads * 32; }
};

// Q8: a quad is 64 bytes of q + 128, used as they are.
struct Q8 {
  static constexpr int kBlockBytes = kQuads * 64 + kCols * 2;
  static constexpr bool kOffset = false;
  static inline void pair(const uint8_t* block, int p, __m512i& first, __m512i& second) {
    first = _mm512_loadu_si512(block + 2 * p * 64);
    second = _mm512_loadu_si512(block + (2 * p + 1) * 64);
  }
  static inline const uint8_t* scales(const uint8_t* block) { return block + kQuads * 64; }
};

// acc += codes . (the 4 signed bytes at p, in every lane), the 4 bytes read by the
// instruction itself ({1to16}): GCC otherwise loads them with a separate broadcast, one
// more instruction per row and quad in the kernel's inner loop.
inline __m512i dpbusd_broadcast(__m512i acc, __m512i codes, const int32_t* p) {
  asm("vpdpbusd %[x]%{1to16%}, %[codes], %[acc]" : [acc] "+v"(acc) : [codes] "v"(codes),
      [x] "m"(*p));
  return acc;
}

inline __m512 load_fp16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// 16 results of a row: rounded to bf16, or float32 (logits, which sampling reads unrounded).
inline void store(c10::BFloat16* p, __m512 v) { simd::store_bf16(p, v); }
inline void store(float* p, __m512 v) { _mm512_storeu_ps(p, v); }

// Column blocks [b0, b1) for rows [r0, r0 + R) of x.
template <typename Codes, int R, typename Out>
void rows_pass(const QuantizedRows& x, const uint8_t* w, Out* out, int64_t K,
               int64_t N, int64_t r0, int64_t b0, int64_t b1) {
  const int64_t groups = K / kGroup;
  const int64_t last = N / kCols * groups - 1;
  for (int64_t b = b0; b < b1; ++b) {
    __m512 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t index = b * groups + g;
      const uint8_t* block = w + index * Codes::kBlockBytes;
      const char* ahead = reinterpret_cast<const char*>(
          w + std::min(index + kPrefetch, last) * Codes::kBlockBytes);
      for (int line = 0; line < Codes::kBlockBytes; line += 64)
        _mm_prefetch(ahead + line, _MM_HINT_T0);
      __m512i hi[R], lo[R];
      for (int r = 0; r < R; ++r) hi[r] = lo[r] = _mm512_setzero_si512();
      for (int p = 0; p < kQuads / 2; ++p) {
        __m512i first, second;
        Codes::pair(block, p, first, second);
        for (int r = 0; r < R; ++r) {  // hi and lo of quad 2p, then of quad 2p + 1
          const int32_t* four = reinterpret_cast<const int32_t*>(
              x.q + (r0 + r) * 2 * K + g * 2 * kGroup + 16 * p);
          hi[r] = dpbusd_broadcast(hi[r], first, four);
          lo[r] = dpbusd_broadcast(lo[r], first, four + 1);
          hi[r] = dpbusd_broadcast(hi[r], second, four + 2);
          lo[r] = dpbusd_broadcast(lo[r], second, four + 3);
        }
      }
      const uint8_t* sc = Codes::scales(block);
      const __m512 d = load_fp16(sc);
      for (int r = 0; r < R; ++r) {
        const int64_t rg = (r0 + r) * groups + g;
        __m512i total = _mm512_add_epi32(_mm512_slli_epi32(hi[r], 8), lo[r]);
        if constexpr (!Codes::kOffset)  // Q8 codes carry +128: take 128 * sum(xq) off
          total = _mm512_sub_epi32(total, _mm512_set1_epi32(128 * x.qsum[rg]));
        const __m512 scale = _mm512_mul_ps(d, _mm512_set1_ps(x.scale[rg]));
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), scale, acc[r]);
      }
      if constexpr (Codes::kOffset) {
        const __m512 m = load_fp16(sc + kCols * 2);
        for (int r = 0; r < R; ++r) {
          const int64_t rg = (r0 + r) * groups + g;
          const float xsum = x.scale[rg] * static_cast<float>(x.qsum[rg]);
          acc[r] = _mm512_fmadd_ps(m, _mm512_set1_ps(xsum), acc[r]);
        }
      }
    }
    for (int r = 0; r < R; ++r) store(out + (r0 + r) * N + b * kCols, acc[r]);
  }
}

template <typename Codes, typename Out>
void column_blocks(const QuantizedRows& x, const uint8_t* w, Out* out, int64_t M,
                   int64_t K, int64_t N, int64_t b0, int64_t b1) {
  // rows in passes of up to 8 over the same blocks (the second pass reads them from cache)
  for (int64_t r0 = 0; r0 < M; r0 += kRowsPerPass) {
    switch (std::min<int64_t>(M - r0, kRowsPerPass)) {
      case 1: rows_pass<Codes, 1, Out>(x, w, out, K, N, r0, b0, b1); break;
      case 2: rows_pass<Codes, 2, Out>(x, w, out, K, N, r0, b0, b1); break;
      case 3: rows_pass<Codes, 3, Out>(x, w, out, K, N, r0, b0, b1); break;
      case 4: rows_pass<Codes, 4, Out>(x, w, out, K, N, r0, b0, b1); break;
      case 5: rows_pass<Codes, 5, Out>(x, w, out, K, N, r0, b0, b1); break;
      case 6: rows_pass<Codes, 6, Out>(x, w, out, K, N, r0, b0, b1); break;
      case 7: rows_pass<Codes, 7, Out>(x, w, out, K, N, r0, b0, b1); break;
      default: rows_pass<Codes, 8, Out>(x, w, out, K, N, r0, b0, b1); break;
    }
  }
}

template <typename Codes>
at::Tensor vnni_matmul(const at::Tensor& x, const at::Tensor& blocks, int64_t N,
                       bool float_out) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kBFloat16 && x.is_cpu(),
              "x must be a 2-D bf16 CPU tensor");
  const int64_t M = x.size(0), K = x.size(1);
  TORCH_CHECK(M >= 1 && M <= kGroupQuantMaxRows, "x must have 1 to ", kGroupQuantMaxRows,
              " rows, got ", M);
  TORCH_CHECK(K % kGroup == 0 && N % kCols == 0 && N > 0, "K must be a multiple of 32 and N of 16");
  TORCH_CHECK(blocks.scalar_type() == at::kByte && blocks.is_contiguous() &&
                  blocks.numel() == N / kCols * (K / kGroup) * Codes::kBlockBytes,
              "the weight's blocks do not fit x's ", K, " columns and ", N, " outputs");
  const at::Tensor xc = x.contiguous();
  const int64_t groups = K / kGroup;
  at::Tensor q = at::empty({M, 2 * K}, x.options().dtype(at::kChar));
  at::Tensor scale = at::empty({M, groups}, x.options().dtype(at::kFloat));
  at::Tensor qsum = at::empty({M, groups}, x.options().dtype(at::kInt));
  quantize(xc.data_ptr<c10::BFloat16>(), M, K, q.data_ptr<int8_t>(), scale.data_ptr<float>(),
           qsum.data_ptr<int32_t>());
  const QuantizedRows rows{q.data_ptr<int8_t>(), scale.data_ptr<float>(),
                           qsum.data_ptr<int32_t>()};
  at::Tensor out = at::empty({M, N}, x.options().dtype(float_out ? at::kFloat : at::kBFloat16));
  const uint8_t* w = blocks.data_ptr<uint8_t>();
  at::parallel_for(0, N / kCols, 4, [&](int64_t b0, int64_t b1) {
    if (float_out)
      column_blocks<Codes>(rows, w, out.data_ptr<float>(), M, K, N, b0, b1);
    else
      column_blocks<Codes>(rows, w, out.data_ptr<c10::BFloat16>(), M, K, N, b0, b1);
  });
  return out;
}

}  // namespace

at::Tensor q4_vnni_matmul(const at::Tensor& x, const at::Tensor& blocks, int64_t n,
                          bool float_out) {
  return vnni_matmul<Q4>(x, blocks, n, float_out);
}

at::Tensor q8_vnni_matmul(const at::Tensor& x, const at::Tensor& blocks, int64_t n,
                          bool float_out) {
  return vnni_matmul<Q8>(x, blocks, n, float_out);
}

}  // namespace headstart
