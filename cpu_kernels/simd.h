// AVX-512 helpers shared by the kernels: bf16 <-> fp32 vectors, vector exp and exp2.
#pragma once

#include <c10/util/BFloat16.h>
#include <immintrin.h>

namespace headstart::simd {

// 16 bf16 -> 16 fp32 (exact: bf16 is the top half of an fp32).
inline __m512 load_bf16(const c10::BFloat16* p) {
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}

// 16 fp32 -> 16 bf16, rounded to nearest even.
inline void store_bf16(c10::BFloat16* p, __m512 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), (__m256i)_mm512_cvtneps_pbh(v));
}

// fp32 values rounded to bf16 precision, kept as fp32: where torch would round.
inline __m512 round_bf16(__m512 v) {
  const __m256i b = (__m256i)_mm512_cvtneps_pbh(v);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
}

// exp (|error| ~1 ulp): 2^n * p(r), r = x - n ln2 in [-ln2/2, ln2/2], p of degree 7.
inline __m512 exp(__m512 x) {
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.f)), _mm512_set1_ps(-88.f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145752f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860677e-6f), r);
  __m512 p = _mm512_set1_ps(1.f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  return _mm512_scalef_ps(p, n);
}

// 2^x for x <= ~8 (|relative error| < 4e-6: p is rounded to bf16 after it): 2^n * p(f),
// n = round(x), f = x - n in [-1/2, 1/2], p a degree-4 fit; x below -126 counts as -126.
inline __m512 exp2(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-126.f));
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 p = _mm512_set1_ps(0.0096004037f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.055916891f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.24023718f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.69312197f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f));
  return _mm512_scalef_ps(p, n);
}

}  // namespace headstart::simd
