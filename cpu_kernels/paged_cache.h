// What both attention kernels do with one layer's paged KV cache
// [2, blocks, block_size, kv_heads, D]: check the new tokens' q, k, v against it, and write
// their K and V at their slots.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>

#include <cstring>

namespace headstart {

// q [T, heads, D], k and v [T, kv_heads, D] (unit stride in D), bf16, heads a multiple of
// kv_heads, D a multiple of 32 up to 256; the cache contiguous with the same kv_heads and D.
inline void check_qkv_cache(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& cache) {
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3, "q, k, v must be [T, heads, D]");
  TORCH_CHECK(q.scalar_type() == at::kBFloat16 && k.scalar_type() == at::kBFloat16 &&
                  v.scalar_type() == at::kBFloat16 && cache.scalar_type() == at::kBFloat16,
              "q, k, v and the cache must be bf16");
  TORCH_CHECK(q.stride(2) == 1 && k.stride(2) == 1 && v.stride(2) == 1,
              "q, k, v need unit stride in head_dim");
  TORCH_CHECK(cache.dim() == 5 && cache.size(0) == 2 && cache.is_contiguous(),
              "cache must be a contiguous [2, blocks, block_size, kv_heads, D]");
  const int64_t T = q.size(0), Hq = q.size(1), D = q.size(2), Hkv = cache.size(3);
  TORCH_CHECK(cache.size(4) == D && k.size(1) == Hkv && v.size(1) == Hkv && k.size(0) == T &&
                  v.size(0) == T && Hq % Hkv == 0,
              "q, k, v and the cache disagree on heads or head_dim");
  TORCH_CHECK(D % 32 == 0 && D <= 256, "head_dim must be a multiple of 32, at most 256");
}

// K and V of token t into cache slot slot[t], for t < k.size(0) (slots already checked).
inline void write_kv(at::Tensor& cache, const at::Tensor& k, const at::Tensor& v,
                     const int64_t* slot) {
  const int64_t T = k.size(0), Hkv = cache.size(3), D = cache.size(4);
  const int64_t token_stride = Hkv * D;
  const int64_t plane = cache.size(1) * cache.size(2) * token_stride;  // K plane -> V plane
  auto* kc = cache.data_ptr<c10::BFloat16>();
  const auto* kp = k.data_ptr<c10::BFloat16>();
  const auto* vp = v.data_ptr<c10::BFloat16>();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < Hkv; ++h) {
      const int64_t at = slot[t] * token_stride + h * D;
      std::memcpy(kc + at, kp + t * k.stride(0) + h * k.stride(1), D * sizeof(c10::BFloat16));
      std::memcpy(kc + plane + at, vp + t * v.stride(0) + h * v.stride(1),
                  D * sizeof(c10::BFloat16));
    }
}

}  // namespace headstart
