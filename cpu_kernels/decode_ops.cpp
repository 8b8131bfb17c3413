// The elementwise steps of a decoder layer, fused: residual add + RMSNorm, RoPE on q and
// k, SiLU gate, one call each instead of ~10 torch ops per layer.
//
// At decode (a few rows) each torch op costs a few microseconds of dispatch whatever its
// size; at prefill the torch versions make several passes over [T, H] activations (the
// norm alone is cat + layer_norm + slice). These round to bf16 where the torch ops they
// replace round, so results are the same up to the order of fp32 sums. Rows are split
// across torch's threads. The residual stream the norms add into may be float32 (the CPU
// model keeps it so: engine/model.py's `residual_stream`), and so may what is added to it
// and the SiLU's input: linears that hand their outputs over unrounded (float32 in, one
// rounding to bf16 out).

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <immintrin.h>

#include <cmath>
#include <type_traits>

#include "kernels.h"
#include "simd.h"

namespace headstart {
namespace {

using simd::load_bf16, simd::round_bf16, simd::store_bf16;

// Rows per task when splitting [T, H] work across threads: a few rows of 576 are
// microseconds, less than waking a thread.
constexpr int64_t kGrainRows = 8;

inline __m512 load(const c10::BFloat16* p) { return load_bf16(p); }
inline __m512 load(const float* p) { return _mm512_loadu_ps(p); }

// RMSNorm of one row (H a multiple of 16; bf16 or a float32 residual stream), rounded once:
// bf16(x / rms(x) * weight), as torch's rms_norm.
template <typename T>
void norm_row(const T* x, const c10::BFloat16* weight, float eps, int64_t H,
              c10::BFloat16* out) {
  __m512 squares = _mm512_setzero_ps();
  for (int64_t i = 0; i < H; i += 16) {
    const __m512 v = load(x + i);
    squares = _mm512_fmadd_ps(v, v, squares);
  }
  const __m512 inv = _mm512_set1_ps(
      1.f / std::sqrt(_mm512_reduce_add_ps(squares) / static_cast<float>(H) + eps));
  for (int64_t i = 0; i < H; i += 16)
    store_bf16(out + i, _mm512_mul_ps(_mm512_mul_ps(load(x + i), inv), load_bf16(weight + i)));
}

// One head rotated in place: bf16(bf16(x * cos) + bf16(swapped * sin)), swapped = [x2, x1]
// and rotate-half's sign folded into sin.
void rope_head(c10::BFloat16* x, const c10::BFloat16* cos, const c10::BFloat16* sin,
               int64_t D) {
  const int64_t half = D / 2;
  for (int64_t i = 0; i < half; i += 16) {
    const __m512 a = load_bf16(x + i), b = load_bf16(x + half + i);
    const __m512 lo = _mm512_add_ps(round_bf16(_mm512_mul_ps(a, load_bf16(cos + i))),
                                    round_bf16(_mm512_mul_ps(b, load_bf16(sin + i))));
    const __m512 hi = _mm512_add_ps(round_bf16(_mm512_mul_ps(b, load_bf16(cos + half + i))),
                                    round_bf16(_mm512_mul_ps(a, load_bf16(sin + half + i))));
    store_bf16(x + i, lo);
    store_bf16(x + half + i, hi);
  }
}

// bf16(bf16(silu(gate)) * up) for one row [gate | up] of width 2I, as torch's ops round;
// from a float32 row (a linear that hands its output over unrounded), bf16(silu(gate) * up).
// silu(x) = x / (1 + e^-x).
template <typename T>
void silu_mul_row(const T* gate_up, int64_t I, c10::BFloat16* out) {
  const __m512 one = _mm512_set1_ps(1.f);
  for (int64_t i = 0; i < I; i += 16) {
    const __m512 x = load(gate_up + i);
    const __m512 e = simd::exp(_mm512_sub_ps(_mm512_setzero_ps(), x));
    __m512 silu = _mm512_div_ps(x, _mm512_add_ps(one, e));
    if constexpr (std::is_same_v<T, c10::BFloat16>) silu = round_bf16(silu);
    store_bf16(out + i, _mm512_mul_ps(silu, load(gate_up + I + i)));
  }
}

void check_rows(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.dim() == 2 && t.scalar_type() == at::kBFloat16 && t.is_cpu() &&
                  t.is_contiguous(),
              name, " must be a contiguous 2-D bf16 CPU tensor");
}

// bf16 or float32 rows
void check_rows_of(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.dim() == 2 && t.is_cpu() && t.is_contiguous() &&
                  (t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kFloat),
              name, " must be a contiguous 2-D bf16 or float32 CPU tensor");
}

// A float32 residual stream x += delta, kept unrounded; out = its norm, rounded once.
template <typename T>
void add_norm_rows(at::Tensor& x, const T* dp, const at::Tensor& weight, double eps,
                   at::Tensor& out) {
  const int64_t H = x.size(1);
  auto* xp = x.data_ptr<float>();
  const auto* wp = weight.data_ptr<c10::BFloat16>();
  auto* op = out.data_ptr<c10::BFloat16>();
  at::parallel_for(0, x.size(0), kGrainRows, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t i = t * H; i < (t + 1) * H; i += 16)
        _mm512_storeu_ps(xp + i, _mm512_add_ps(_mm512_loadu_ps(xp + i), load(dp + i)));
      norm_row(xp + t * H, wp, static_cast<float>(eps), H, op + t * H);
    }
  });
}

}  // namespace

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_rows(x, "x");
  TORCH_CHECK(weight.numel() == x.size(1) && weight.scalar_type() == at::kBFloat16 &&
                  weight.is_contiguous(),
              "weight must be bf16 with one value per column");
  TORCH_CHECK(x.size(1) % 16 == 0, "the hidden size must be a multiple of 16");
  at::Tensor out = at::empty_like(x);
  const int64_t H = x.size(1);
  const auto* xp = x.data_ptr<c10::BFloat16>();
  const auto* wp = weight.data_ptr<c10::BFloat16>();
  auto* op = out.data_ptr<c10::BFloat16>();
  at::parallel_for(0, x.size(0), kGrainRows, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      norm_row(xp + t * H, wp, static_cast<float>(eps), H, op + t * H);
  });
  return out;
}

at::Tensor add_rms_norm_(at::Tensor& x, const at::Tensor& delta,
                         const at::Tensor& weight, double eps) {
  check_rows_of(x, "x");
  check_rows_of(delta, "delta");
  TORCH_CHECK(delta.sizes() == x.sizes(), "delta must have x's shape");
  TORCH_CHECK(x.size(1) % 16 == 0, "the hidden size must be a multiple of 16");
  TORCH_CHECK(weight.numel() == x.size(1) && weight.scalar_type() == at::kBFloat16 &&
                  weight.is_contiguous(),
              "weight must be bf16 with one value per column");
  if (x.scalar_type() == at::kBFloat16) {
    check_rows(delta, "delta");  // a bf16 stream adds bf16
    const int64_t H = x.size(1);
    auto* xp = x.data_ptr<c10::BFloat16>();
    const auto* dp = delta.data_ptr<c10::BFloat16>();
    at::parallel_for(0, x.size(0), kGrainRows, [&](int64_t t0, int64_t t1) {
      for (int64_t i = t0 * H; i < t1 * H; i += 16)  // x += delta, rounded like torch's add
        store_bf16(xp + i, _mm512_add_ps(load_bf16(xp + i), load_bf16(dp + i)));
    });
    return rms_norm(x, weight, eps);
  }
  at::Tensor out = at::empty(x.sizes(), weight.options());
  if (delta.scalar_type() == at::kFloat)
    add_norm_rows(x, delta.data_ptr<float>(), weight, eps, out);
  else
    add_norm_rows(x, delta.data_ptr<c10::BFloat16>(), weight, eps, out);
  return out;
}

void rope_(at::Tensor& qk, const at::Tensor& cos, const at::Tensor& sin) {
  TORCH_CHECK(qk.dim() == 3 && qk.scalar_type() == at::kBFloat16 && qk.stride(2) == 1,
              "qk must be bf16 [T, heads, head_dim] with unit stride in head_dim");
  const int64_t T = qk.size(0), heads = qk.size(1), D = qk.size(2);
  TORCH_CHECK(D % 32 == 0, "head_dim must be a multiple of 32");
  TORCH_CHECK(cos.is_contiguous() && sin.is_contiguous() && cos.numel() == T * D &&
                  sin.numel() == T * D && cos.scalar_type() == at::kBFloat16,
              "cos and sin must be contiguous bf16 [T, 1, head_dim]");
  auto* base = qk.data_ptr<c10::BFloat16>();
  const auto* cp = cos.data_ptr<c10::BFloat16>();
  const auto* sp = sin.data_ptr<c10::BFloat16>();
  at::parallel_for(0, T, kGrainRows, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t h = 0; h < heads; ++h)
        rope_head(base + t * qk.stride(0) + h * qk.stride(1), cp + t * D, sp + t * D, D);
  });
}

at::Tensor silu_mul(const at::Tensor& gate_up) {
  check_rows_of(gate_up, "gate_up");
  const int64_t T = gate_up.size(0), I = gate_up.size(1) / 2;
  TORCH_CHECK(I % 16 == 0, "the intermediate size must be a multiple of 16");
  at::Tensor out = at::empty({T, I}, gate_up.options().dtype(at::kBFloat16));
  auto* op = out.data_ptr<c10::BFloat16>();
  const bool wide = gate_up.scalar_type() == at::kFloat;
  const float* gf = wide ? gate_up.data_ptr<float>() : nullptr;
  const c10::BFloat16* gb = wide ? nullptr : gate_up.data_ptr<c10::BFloat16>();
  at::parallel_for(0, T, kGrainRows, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      if (wide)
        silu_mul_row(gf + t * 2 * I, I, op + t * I);
      else
        silu_mul_row(gb + t * 2 * I, I, op + t * I);
    }
  });
  return out;
}

}  // namespace headstart
