// y = x @ W.T for 1-16 bf16 rows of x against W kept as 4- or 8-bit codes in groups of 32
// (GGUF's Q4_1 and Q8_0), on CPUs with AMX: the decode steps of a small model.
//
// Why: a decode step reads every weight once, and dense bf16 weights are 4x the bytes of
// Q4 codes; torch's int4 kernel reads the codes but dequantises once per 4 rows, so its
// cost grows with the batch. Here the codes are unpacked once per step into AMX tiles and
// all rows are multiplied by one tile instruction.
//
// Layout (made by cpu_kernels/amx_blocks.py): W is cut into blocks of 16 output columns x
// 32 inputs (one quantisation group per column). A block's codes are stored as the 16 rows
// of an AMX bf16 "B" tile: row r holds, for each column n, the pair (W[n][2r], W[n][2r+1]).
// Q4 packs rows 2i and 2i+1 into the low and high nibbles of 32 bytes; Q8 stores 32 bytes a
// row. Codes become exact bf16 without arithmetic: for Q4, 0x4300 | q is the bf16 of 128 + q;
// Q8 codes go through float32. The tile product P = x_block . V_block is then scaled per
// column: y[m][n] += scale[n] * P[m][n] + offset[n] * sum(x_block[m]), where for Q4
// offset = min - 128 * scale (so that scale * (128 + q) + offset = q * scale + min).

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <immintrin.h>
#include <sys/syscall.h>

#include <algorithm>
#include <unistd.h>

#include "kernels.h"

namespace headstart {
namespace {

constexpr int kGroup = 32;      // inputs per block: one quantisation group
constexpr int kCols = 16;       // output columns per block: one AMX tile's width in fp32
constexpr int kMaxRows = kGroupQuantMaxRows;  // rows of x: one AMX tile's height
constexpr int kTileRows = 16;   // rows of a B tile: 32 inputs as 16 pairs
constexpr int kPrefetchBlocks = 4;  // how far ahead the codes are prefetched

struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Q4: 32 bytes -> B rows 2i (low nibbles) and 2i+1 (high nibbles) as bf16 of 128 + q.
struct UnpackQ4 {
  using Code = uint8_t;
  static constexpr int kBlockBytes = kTileRows / 2 * 32;
  static constexpr bool kOffset = true;
  static inline void rows(const uint8_t* codes, uint16_t* tile) {
    const __m512i nibble = _mm512_set1_epi16(0x0F), bias = _mm512_set1_epi16(0x4300);
    for (int i = 0; i < kTileRows / 2; ++i) {
      const __m512i words = _mm512_cvtepu8_epi16(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + i * 32)));
      // (words & 0x0F) | 0x4300 in one ternary-logic op: A=words, B=nibble, C=bias
      const __m512i lo = _mm512_ternarylogic_epi32(words, nibble, bias, 0xEA);
      const __m512i hi = _mm512_or_si512(_mm512_srli_epi16(words, 4), bias);
      _mm512_store_si512(tile + (2 * i) * 32, lo);
      _mm512_store_si512(tile + (2 * i + 1) * 32, hi);
    }
  }
};

// Q8: 32 signed bytes a B row, converted exactly to bf16 (|q| <= 128 fits 8 bits).
struct UnpackQ8 {
  using Code = int8_t;
  static constexpr int kBlockBytes = kTileRows * 32;
  static constexpr bool kOffset = false;
  static inline void rows(const int8_t* codes, uint16_t* tile) {
    for (int r = 0; r < kTileRows; ++r) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + r * 32));
      const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q)));
      const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1)));
      _mm512_store_si512(tile + r * 32, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
  }
};

// 16 results of a row: rounded to bf16, or float32 (logits, which sampling reads unrounded).
inline void store(c10::BFloat16* p, __m512 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), (__m256i)_mm512_cvtneps_pbh(v));
}
inline void store(float* p, __m512 v) { _mm512_storeu_ps(p, v); }

// Column blocks [b0, b1) of the output for all M rows of x.
template <typename Unpack, typename Out>
void column_blocks(const c10::BFloat16* x, const float* xsum, const typename Unpack::Code* codes,
                   const float* scales, const float* offsets, Out* out, int64_t M,
                   int64_t K, int64_t N, int64_t b0, int64_t b1) {
  TileConfig cfg;
  cfg.rows[0] = M, cfg.colsb[0] = kCols * 4;          // product: M x 16 fp32
  cfg.rows[1] = M, cfg.colsb[1] = kGroup * 2;         // x block: M x 32 bf16
  cfg.rows[2] = kTileRows, cfg.colsb[2] = kCols * 4;  // codes: 16 x 16 pairs of bf16
  _tile_loadconfig(&cfg);
  alignas(64) uint16_t tile[kTileRows * 32];
  alignas(64) float prod[kMaxRows * kCols];
  const int64_t groups = K / kGroup, last_block = N / kCols * groups - 1;
  for (int64_t b = b0; b < b1; ++b) {
    __m512 acc[kMaxRows];
    for (int m = 0; m < M; ++m) acc[m] = _mm512_setzero_ps();
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t block = b * groups + g;
      // the codes stream from memory once per step: ask for a later block's lines now
      const int64_t later = std::min(block + kPrefetchBlocks, last_block);
      const char* ahead = reinterpret_cast<const char*>(codes + later * Unpack::kBlockBytes);
      for (int line = 0; line < Unpack::kBlockBytes; line += 64)
        _mm_prefetch(ahead + line, _MM_HINT_T0);
      Unpack::rows(codes + block * Unpack::kBlockBytes, tile);
      _tile_zero(0);
      _tile_loadd(1, x + g * kGroup, K * sizeof(c10::BFloat16));
      _tile_loadd(2, tile, kCols * 4);
      _tile_dpbf16ps(0, 1, 2);
      _tile_stored(0, prod, kCols * 4);
      const __m512 scale = _mm512_loadu_ps(scales + block * kCols);
      for (int m = 0; m < M; ++m)
        acc[m] = _mm512_fmadd_ps(_mm512_load_ps(prod + m * kCols), scale, acc[m]);
      if constexpr (Unpack::kOffset) {
        const __m512 offset = _mm512_loadu_ps(offsets + block * kCols);
        for (int m = 0; m < M; ++m)
          acc[m] = _mm512_fmadd_ps(_mm512_set1_ps(xsum[m * groups + g]), offset, acc[m]);
      }
    }
    for (int m = 0; m < M; ++m) store(out + m * N + b * kCols, acc[m]);
  }
  _tile_release();
}

template <typename Unpack>
at::Tensor block_matmul(const at::Tensor& x, const at::Tensor& codes,
                        const at::Tensor& scales, const at::Tensor* offsets, bool float_out) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kBFloat16 && x.is_cpu(),
              "x must be a 2-D bf16 CPU tensor");
  const int64_t M = x.size(0), K = x.size(1);
  TORCH_CHECK(M >= 1 && M <= kMaxRows, "x must have 1 to ", kMaxRows, " rows, got ", M);
  TORCH_CHECK(scales.dim() == 3 && scales.size(2) == kCols &&
                  scales.scalar_type() == at::kFloat && scales.is_contiguous(),
              "scales must be float32 [N/16, K/32, 16]");
  TORCH_CHECK(scales.size(1) * kGroup == K, "x has ", K, " columns, the weight takes ",
              scales.size(1) * kGroup);
  const int64_t blocks = scales.size(0), N = blocks * kCols, groups = K / kGroup;
  TORCH_CHECK(codes.is_contiguous() && codes.numel() == blocks * groups * Unpack::kBlockBytes,
              "codes have the wrong size");
  if (offsets != nullptr)
    TORCH_CHECK(offsets->sizes() == scales.sizes() && offsets->is_contiguous() &&
                    offsets->scalar_type() == at::kFloat,
                "offsets must match scales");
  const at::Tensor xc = x.contiguous();
  // per-row sums of each group of x, for the offsets (rounded x, summed in fp32)
  const at::Tensor xsum = xc.view({M, groups, kGroup}).sum(-1, false, at::kFloat).contiguous();
  at::Tensor out = at::empty({M, N}, x.options().dtype(float_out ? at::kFloat : at::kBFloat16));
  const auto* xp = xc.data_ptr<c10::BFloat16>();
  const auto* cp = reinterpret_cast<const typename Unpack::Code*>(codes.data_ptr());
  const float* sp = scales.data_ptr<float>();
  const float* op = offsets ? offsets->data_ptr<float>() : nullptr;
  const float* xs = xsum.data_ptr<float>();
  at::parallel_for(0, blocks, 4, [&](int64_t b0, int64_t b1) {
    if (float_out)
      column_blocks<Unpack>(xp, xs, cp, sp, op, out.data_ptr<float>(), M, K, N, b0, b1);
    else
      column_blocks<Unpack>(xp, xs, cp, sp, op, out.data_ptr<c10::BFloat16>(), M, K, N, b0, b1);
  });
  return out;
}

}  // namespace

at::Tensor q4_matmul(const at::Tensor& x, const at::Tensor& codes,
                     const at::Tensor& scales, const at::Tensor& offsets, bool float_out) {
  TORCH_CHECK(codes.scalar_type() == at::kByte, "Q4 codes must be uint8");
  return block_matmul<UnpackQ4>(x, codes, scales, &offsets, float_out);
}

at::Tensor q8_matmul(const at::Tensor& x, const at::Tensor& codes,
                     const at::Tensor& scales, bool float_out) {
  TORCH_CHECK(codes.scalar_type() == at::kChar, "Q8 codes must be int8");
  return block_matmul<UnpackQ8>(x, codes, scales, nullptr, float_out);
}

bool request_amx() {
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

}  // namespace headstart
