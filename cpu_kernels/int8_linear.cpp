// y = x @ W.T for bf16 rows x against int8 weights with one scale per output channel: the
// prefill matmuls on CPUs with AVX-512 VNNI, where int8 products run at twice bf16's rate
// (torch._int_mm: ~1.8 TOP/s against ~0.9 TFLOP/s for bf16 on 2 Zen 4 threads).
//
// Each row of x is first divided, column by column, by the layer's smoothing factors
// (SmoothQuant: an outlier channel of x is moved into W's matching column, which the
// loader multiplied by it; engine/weights/int8.py), then quantised with its own scale
// (max |x| / 127, "per token"), multiplied by torch's int8 matmul (oneDNN, VNNI) into
// int32, and scaled back to bf16 in one pass: y[m][n] = bf16(acc[m][n] * xs[m] * ws[n] +
// bias[n]). The quantising and scaling passes are the kernels here; with torch ops for
// them the int8 path gains only ~1.4x over bf16.
//
// A few input channels whose outliers smoothing cannot tame (LLM.int8(), Dettmers et al.,
// 2022) stay out of the int8 product: the loader gives them a smoothing factor of 0 (so
// they neither set a row's scale nor enter the codes) and hands their float weights over;
// the scaling pass adds x[m][c] * w[c][n] for each of them.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <immintrin.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "kernels.h"
#include "simd.h"

namespace headstart {
namespace {

using simd::load_bf16;

constexpr int64_t kGrainRows = 8;

// x * smooth (per column; smooth null: 1) as int8 with one scale for the row:
// q = round(x * smooth * 127 / max|x * smooth|) (ties to even), scale = max / 127.
float quantize_row(const c10::BFloat16* x, const float* smooth, int64_t K, int8_t* q) {
  const auto scaled = [&](int64_t i) {
    const __m512 v = load_bf16(x + i);
    return smooth == nullptr ? v : _mm512_mul_ps(v, _mm512_loadu_ps(smooth + i));
  };
  __m512 top = _mm512_setzero_ps();
  for (int64_t i = 0; i < K; i += 16) top = _mm512_max_ps(top, _mm512_abs_ps(scaled(i)));
  const float absmax = _mm512_reduce_max_ps(top);
  const __m512 inv = _mm512_set1_ps(absmax > 0.f ? 127.f / absmax : 0.f);
  for (int64_t i = 0; i < K; i += 16) {
    const __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(scaled(i), inv));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i), _mm512_cvtsepi32_epi8(v));
  }
  return absmax / 127.f;
}

// Input channels kept out of the int8 product: their columns of x and rows of W.T in float.
struct Outliers {
  const int64_t* cols = nullptr;  // [k]
  const float* weight = nullptr;  // [k, N]
  int64_t k = 0;
};

// out[n, n + 16 B) of one row: bf16(acc * xs * ws (+ bias) + xo @ outliers). B vectors at
// once, so the k multiply-adds into each are B independent chains rather than one.
template <int B>
inline void scale_block(const int32_t* acc, __m512 row, const float* ws,
                        const c10::BFloat16* bias, const float* xo, const Outliers& outliers,
                        int64_t N, int64_t n, c10::BFloat16* out) {
  __m512 y[B];
  for (int b = 0; b < B; ++b) {
    const int64_t i = n + 16 * b;
    y[b] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_loadu_si512(acc + i)),
                         _mm512_mul_ps(row, _mm512_loadu_ps(ws + i)));
    if (bias != nullptr) y[b] = _mm512_add_ps(y[b], load_bf16(bias + i));
  }
  for (int64_t j = 0; j < outliers.k; ++j) {
    const __m512 xj = _mm512_set1_ps(xo[j]);
    const float* w = outliers.weight + j * N + n;
    for (int b = 0; b < B; ++b) y[b] = _mm512_fmadd_ps(xj, _mm512_loadu_ps(w + 16 * b), y[b]);
  }
  for (int b = 0; b < B; ++b) simd::store_bf16(out + n + 16 * b, y[b]);
}

// Rows [m0, m1) of out = bf16(acc * xs * ws (+ bias) + x[:, cols] @ outliers), N a multiple
// of 16. Column blocks outside, rows inside: a block's outlier weights (k x 64 floats) stay
// in L1 for every row instead of streaming k x N floats from L2 per row.
void scale_rows(const int32_t* acc, const float* xs, const float* ws, const c10::BFloat16* bias,
                const c10::BFloat16* x, int64_t K, const Outliers& outliers, int64_t N,
                int64_t m0, int64_t m1, c10::BFloat16* out) {
  const int64_t k = outliers.k;
  std::vector<float> xo((m1 - m0) * k);
  for (int64_t m = m0; m < m1; ++m)
    for (int64_t j = 0; j < k; ++j)
      xo[(m - m0) * k + j] = static_cast<float>(x[m * K + outliers.cols[j]]);
  int64_t n = 0;
  for (; n + 64 <= N; n += 64)
    for (int64_t m = m0; m < m1; ++m)
      scale_block<4>(acc + m * N, _mm512_set1_ps(xs[m]), ws, bias, xo.data() + (m - m0) * k,
                     outliers, N, n, out + m * N);
  for (; n < N; n += 16)
    for (int64_t m = m0; m < m1; ++m)
      scale_block<1>(acc + m * N, _mm512_set1_ps(xs[m]), ws, bias, xo.data() + (m - m0) * k,
                     outliers, N, n, out + m * N);
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> quantize_rows(const at::Tensor& x,
                                                 const c10::optional<at::Tensor>& smooth) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kBFloat16 && x.is_cpu(),
              "x must be a 2-D bf16 CPU tensor");
  TORCH_CHECK(x.size(1) % 16 == 0, "x must have a multiple of 16 columns");
  const at::Tensor xc = x.contiguous();
  const int64_t M = xc.size(0), K = xc.size(1);
  const bool smoothed = smooth.has_value() && smooth->defined();
  if (smoothed)
    TORCH_CHECK(smooth->scalar_type() == at::kFloat && smooth->numel() == K &&
                    smooth->is_contiguous(),
                "smooth must be float32 [K]");
  const float* fp = smoothed ? smooth->data_ptr<float>() : nullptr;
  at::Tensor q = at::empty({M, K}, xc.options().dtype(at::kChar));
  at::Tensor scales = at::empty({M}, xc.options().dtype(at::kFloat));
  const auto* xp = xc.data_ptr<c10::BFloat16>();
  auto* qp = q.data_ptr<int8_t>();
  float* sp = scales.data_ptr<float>();
  at::parallel_for(0, M, kGrainRows, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) sp[m] = quantize_row(xp + m * K, fp, K, qp + m * K);
  });
  return {q, scales};
}

at::Tensor int8_linear(const at::Tensor& x, const at::Tensor& weight_t,
                       const at::Tensor& weight_scales, const c10::optional<at::Tensor>& bias,
                       const c10::optional<at::Tensor>& smooth,
                       const c10::optional<at::Tensor>& outlier_cols,
                       const c10::optional<at::Tensor>& outlier_weight) {
  TORCH_CHECK(weight_t.dim() == 2 && weight_t.scalar_type() == at::kChar,
              "the weight must be int8 [K, N]");
  TORCH_CHECK(x.dim() == 2 && x.size(1) == weight_t.size(0), "x has ", x.size(-1),
              " columns, the weight takes ", weight_t.size(0));
  const int64_t M = x.size(0), N = weight_t.size(1);
  TORCH_CHECK(N % 16 == 0, "the weight must have a multiple of 16 outputs");
  TORCH_CHECK(weight_scales.scalar_type() == at::kFloat && weight_scales.numel() == N &&
                  weight_scales.is_contiguous(),
              "weight_scales must be float32 [N]");
  const bool has_bias = bias.has_value() && bias->defined();
  if (has_bias)
    TORCH_CHECK(bias->scalar_type() == at::kBFloat16 && bias->numel() == N &&
                    bias->is_contiguous(),
                "bias must be bf16 [N]");
  Outliers outliers;
  if (outlier_cols.has_value() && outlier_cols->defined()) {
    TORCH_CHECK(outlier_weight.has_value() && outlier_weight->defined(),
                "outlier_cols needs outlier_weight");
    const int64_t k = outlier_cols->numel();
    TORCH_CHECK(outlier_cols->scalar_type() == at::kLong && outlier_cols->is_contiguous() &&
                    k <= 64,
                "outlier_cols must be int64 [k], k <= 64");
    TORCH_CHECK(outlier_weight->scalar_type() == at::kFloat && outlier_weight->is_contiguous() &&
                    outlier_weight->dim() == 2 && outlier_weight->size(0) == k &&
                    outlier_weight->size(1) == N,
                "outlier_weight must be float32 [k, N]");
    outliers = {outlier_cols->data_ptr<int64_t>(), outlier_weight->data_ptr<float>(), k};
    for (int64_t j = 0; j < k; ++j)
      TORCH_CHECK(outliers.cols[j] >= 0 && outliers.cols[j] < x.size(1),
                  "outlier_cols out of range");
  }
  const at::Tensor xc = x.contiguous();
  auto [q, xs] = quantize_rows(xc, smooth);
  const at::Tensor acc = at::_int_mm(q, weight_t);
  at::Tensor out = at::empty({M, N}, x.options());
  const int32_t* ap = acc.data_ptr<int32_t>();
  const float* xsp = xs.data_ptr<float>();
  const float* wsp = weight_scales.data_ptr<float>();
  const c10::BFloat16* bp = has_bias ? bias->data_ptr<c10::BFloat16>() : nullptr;
  const auto* xp = xc.data_ptr<c10::BFloat16>();
  auto* op = out.data_ptr<c10::BFloat16>();
  at::parallel_for(0, M, kGrainRows, [&](int64_t m0, int64_t m1) {
    scale_rows(ap, xsp, wsp, bp, xp, xc.size(1), outliers, N, m0, m1, op);
  });
  return out;
}

}  // namespace headstart
