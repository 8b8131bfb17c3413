// The small elementwise steps of a decoder layer, fused for decode steps (few rows).
//
// At batch 1 a layer's matmuls take tens of microseconds and each of the ~20 torch ops
// around them costs a few microseconds of dispatch whatever its size; these kernels do
// residual-add + RMSNorm, RoPE on q and k, and SiLU-gate in one call each. They round
// to bf16 where the torch ops they replace round, so the results are the same up to the
// order of fp32 sums.

#include <c10/util/BFloat16.h>
#include <immintrin.h>

#include <cmath>

#include "kernels.h"
#include "simd.h"

namespace headstart {
namespace {

using simd::load_bf16, simd::round_bf16, simd::store_bf16;

// RMSNorm of one row, rounded once: bf16(x / rms(x) * weight), as torch's rms_norm.
void norm_row(const c10::BFloat16* x, const c10::BFloat16* weight, float eps, int64_t H,
              c10::BFloat16* out) {
  float squares = 0.f;
  for (int64_t i = 0; i < H; ++i) {
    const float v = static_cast<float>(x[i]);
    squares += v * v;
  }
  const float inv = 1.f / std::sqrt(squares / static_cast<float>(H) + eps);
  for (int64_t i = 0; i < H; ++i)
    out[i] = c10::BFloat16(static_cast<float>(x[i]) * inv * static_cast<float>(weight[i]));
}

void check_rows(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.dim() == 2 && t.scalar_type() == at::kBFloat16 && t.is_cpu() &&
                  t.is_contiguous(),
              name, " must be a contiguous 2-D bf16 CPU tensor");
}

}  // namespace

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  check_rows(x, "x");
  TORCH_CHECK(weight.numel() == x.size(1) && weight.scalar_type() == at::kBFloat16 &&
                  weight.is_contiguous(),
              "weight must be bf16 with one value per column");
  torch::Tensor out = torch::empty_like(x);
  const int64_t T = x.size(0), H = x.size(1);
  for (int64_t t = 0; t < T; ++t)
    norm_row(x.data_ptr<c10::BFloat16>() + t * H, weight.data_ptr<c10::BFloat16>(),
             static_cast<float>(eps), H, out.data_ptr<c10::BFloat16>() + t * H);
  return out;
}

torch::Tensor add_rms_norm_(torch::Tensor& x, const torch::Tensor& delta,
                            const torch::Tensor& weight, double eps) {
  check_rows(x, "x");
  check_rows(delta, "delta");
  TORCH_CHECK(delta.sizes() == x.sizes(), "delta must have x's shape");
  const int64_t n = x.numel();
  auto* xp = x.data_ptr<c10::BFloat16>();
  const auto* dp = delta.data_ptr<c10::BFloat16>();
  for (int64_t i = 0; i < n; ++i)  // x += delta, rounded to bf16 like torch's add
    xp[i] = c10::BFloat16(static_cast<float>(xp[i]) + static_cast<float>(dp[i]));
  return rms_norm(x, weight, eps);
}

void rope_(torch::Tensor& qk, const torch::Tensor& cos, const torch::Tensor& sin) {
  TORCH_CHECK(qk.dim() == 3 && qk.scalar_type() == at::kBFloat16 && qk.stride(2) == 1,
              "qk must be bf16 [T, heads, head_dim] with unit stride in head_dim");
  const int64_t T = qk.size(0), heads = qk.size(1), D = qk.size(2), half = D / 2;
  TORCH_CHECK(D % 32 == 0, "head_dim must be a multiple of 32");
  TORCH_CHECK(cos.is_contiguous() && sin.is_contiguous() && cos.numel() == T * D &&
                  sin.numel() == T * D && cos.scalar_type() == at::kBFloat16,
              "cos and sin must be contiguous bf16 [T, 1, head_dim]");
  auto* base = qk.data_ptr<c10::BFloat16>();
  for (int64_t t = 0; t < T; ++t) {
    const auto* c = cos.data_ptr<c10::BFloat16>() + t * D;
    const auto* s = sin.data_ptr<c10::BFloat16>() + t * D;  // rotate-half's sign folded in
    for (int64_t h = 0; h < heads; ++h) {
      c10::BFloat16* x = base + t * qk.stride(0) + h * qk.stride(1);
      for (int64_t i = 0; i < half; i += 16) {
        const __m512 a = load_bf16(x + i), b = load_bf16(x + half + i);
        // bf16(bf16(x * cos) + bf16(swapped * sin)), swapped = [x2, x1]
        const __m512 lo = _mm512_add_ps(round_bf16(_mm512_mul_ps(a, load_bf16(c + i))),
                                        round_bf16(_mm512_mul_ps(b, load_bf16(s + i))));
        const __m512 hi =
            _mm512_add_ps(round_bf16(_mm512_mul_ps(b, load_bf16(c + half + i))),
                          round_bf16(_mm512_mul_ps(a, load_bf16(s + half + i))));
        store_bf16(x + i, lo);
        store_bf16(x + half + i, hi);
      }
    }
  }
}

torch::Tensor silu_mul(const torch::Tensor& gate_up) {
  check_rows(gate_up, "gate_up");
  const int64_t T = gate_up.size(0), I = gate_up.size(1) / 2;
  TORCH_CHECK(I % 16 == 0, "the intermediate size must be a multiple of 16");
  torch::Tensor out = torch::empty({T, I}, gate_up.options());
  for (int64_t t = 0; t < T; ++t) {
    const auto* g = gate_up.data_ptr<c10::BFloat16>() + t * 2 * I;
    auto* o = out.data_ptr<c10::BFloat16>() + t * I;
    for (int64_t i = 0; i < I; i += 16) {
      const __m512 x = load_bf16(g + i);
      // bf16(bf16(silu(gate)) * up), silu(x) = x / (1 + exp(-x))
      const __m512 silu = round_bf16(_mm512_div_ps(
          x, _mm512_add_ps(_mm512_set1_ps(1.f), simd::exp(_mm512_sub_ps(_mm512_setzero_ps(), x)))));
      store_bf16(o + i, _mm512_mul_ps(silu, load_bf16(g + I + i)));
    }
  }
  return out;
}

}  // namespace headstart
