// Elements as the kernels move them: aligned vectors (`VecN`) and 32-bit words of one float or
// two 16-bit values (`Words`), converted to and from float a word at a time.
#pragma once

#include "device.cuh"

namespace ir_cuda {

// N elements of U in one aligned access (16 bytes for the activations' own type).
template <typename U, int N>
struct alignas(sizeof(U) * N) VecN {
  U v[N];
};

// Elements of T per 16-byte vector.
template <typename T>
constexpr int vec_width() {
  return 16 / static_cast<int>(sizeof(T));
}

__device__ __forceinline__ bool aligned(const void* p, int bytes) {
  return (reinterpret_cast<uintptr_t>(p) & static_cast<uintptr_t>(bytes - 1)) == 0;
}

// Bits of a float and back (`__uint_as_float` on the GPU).
__device__ __forceinline__ float bits_to_float(uint32_t w) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(w);
#else
  float f;
  std::memcpy(&f, &w, sizeof(f));
  return f;
#endif
}

// The 32 bits of a two-element vector type (`__nv_bfloat162`, `__half2`) or a float.
template <typename P>
__device__ __forceinline__ uint32_t word_bits(const P& p) {
  static_assert(sizeof(P) == sizeof(uint32_t), "word_bits: a 32-bit value");
  uint32_t w;
  std::memcpy(&w, &p, sizeof(w));
  return w;
}

// A two-element vector type (`__nv_bfloat162`, `__half2`) from its 32 bits.
template <typename P>
__device__ __forceinline__ P from_bits(uint32_t w) {
  static_assert(sizeof(P) == sizeof(uint32_t), "from_bits: a 32-bit value");
  P p;
  std::memcpy(&p, &w, sizeof(p));
  return p;
}

// The sum of two words of two 16-bit values each, element by element, rounded to their type
// (`add_words`): the paired add of the vector type P (`__nv_bfloat162`, `__half2`) on the GPU;
// in host builds the float32 sum rounded back by W (`Words<T>`), the same bits.
template <typename P, typename W>
__device__ __forceinline__ uint32_t paired_add(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return word_bits(__hadd2(from_bits<P>(a), from_bits<P>(b)));
#else
  float f[2], g[2];
  W::unpack(a, f);
  W::unpack(b, g);
  f[0] += g[0];
  f[1] += g[1];
  return W::pack(f);
#endif
}

// Host builds: two floats rounded to the 16-bit c10 type H, the first in the low half.
template <typename H>
inline uint32_t pack_pair_host(const float* f) {
  return static_cast<uint32_t>(H(f[0]).x) | static_cast<uint32_t>(H(f[1]).x) << 16;
}

// Elements of T as 32-bit words (two per word for the 16-bit types), converted to and from
// float a word at a time. A row held this way takes its packed size in registers, and reading
// a bfloat16 is one shift or mask where c10's type permutes bytes per element.
template <typename T>
struct Words;

template <>
struct Words<float> {
  static constexpr int kPerWord = 1;
  static constexpr uint32_t kOnes = 0x3f800000u;
  __device__ __forceinline__ static void unpack(uint32_t w, float* f) { f[0] = bits_to_float(w); }
  __device__ __forceinline__ static uint32_t pack(const float* f) { return word_bits(f[0]); }
  __device__ __forceinline__ static float round(float v) { return v; }
  __device__ __forceinline__ static uint32_t add(uint32_t a, uint32_t b) {
    return word_bits(bits_to_float(a) + bits_to_float(b));
  }
};

template <>
struct Words<c10::BFloat16> {
  static constexpr int kPerWord = 2;
  static constexpr uint32_t kOnes = 0x3f803f80u;
  __device__ __forceinline__ static void unpack(uint32_t w, float* f) {
    f[0] = bits_to_float(w << 16);
    f[1] = bits_to_float(w & 0xffff0000u);
  }
  // round to nearest even, both halves in one conversion on the GPU
  __device__ __forceinline__ static uint32_t pack(const float* f) {
#if defined(__CUDA_ARCH__)
    return word_bits(__floats2bfloat162_rn(f[0], f[1]));
#else
    return pack_pair_host<c10::BFloat16>(f);
#endif
  }
  __device__ __forceinline__ static float round(float v) {
#if defined(__CUDA_ARCH__)
    return __bfloat162float(__float2bfloat16_rn(v));
#else
    return static_cast<float>(c10::BFloat16(v));
#endif
  }
  __device__ __forceinline__ static uint32_t add(uint32_t a, uint32_t b) {
    return paired_add<__nv_bfloat162, Words>(a, b);
  }
};

template <>
struct Words<c10::Half> {
  static constexpr int kPerWord = 2;
  static constexpr uint32_t kOnes = 0x3c003c00u;
  __device__ __forceinline__ static void unpack(uint32_t w, float* f) {
#if defined(__CUDA_ARCH__)
    __half2 h;
    std::memcpy(&h, &w, sizeof(h));
    const float2 v = __half22float2(h);
    f[0] = v.x;
    f[1] = v.y;
#else
    f[0] = static_cast<float>(c10::Half(static_cast<uint16_t>(w & 0xffffu), c10::Half::from_bits()));
    f[1] = static_cast<float>(c10::Half(static_cast<uint16_t>(w >> 16), c10::Half::from_bits()));
#endif
  }
  __device__ __forceinline__ static uint32_t pack(const float* f) {
#if defined(__CUDA_ARCH__)
    return word_bits(__floats2half2_rn(f[0], f[1]));
#else
    return pack_pair_host<c10::Half>(f);
#endif
  }
  __device__ __forceinline__ static float round(float v) {
#if defined(__CUDA_ARCH__)
    return __half2float(__float2half_rn(v));
#else
    return static_cast<float>(c10::Half(v));
#endif
  }
  __device__ __forceinline__ static uint32_t add(uint32_t a, uint32_t b) {
    return paired_add<__half2, Words>(a, b);
  }
};

// N words in one access (a 16-byte vector at N = 4), and their elements as floats.
template <int N>
using WordsN = VecN<uint32_t, N>;
using Words4 = WordsN<4>;

template <typename T, int N>
__device__ __forceinline__ void unpack_words(const WordsN<N>& v, float* f) {
#pragma unroll
  for (int w = 0; w < N; ++w) Words<T>::unpack(v.v[w], f + w * Words<T>::kPerWord);
}

template <typename T, int N = 4>
__device__ __forceinline__ WordsN<N> pack_words(const float* f) {
  WordsN<N> v;
#pragma unroll
  for (int w = 0; w < N; ++w) v.v[w] = Words<T>::pack(f + w * Words<T>::kPerWord);
  return v;
}

// a + b element by element, rounded to T: the 16-bit types' paired add, one instruction a word
// where unpacking, two float adds and a conversion took seven. The same bits as the float32 sum
// rounded to T: two T values sum exactly in float32 unless one is under 2^-12 of the other
// (fp16; 2^-15 for bfloat16), and then both roundings return the larger.
template <typename T, int N>
__device__ __forceinline__ WordsN<N> add_words(const WordsN<N>& a, const WordsN<N>& b) {
  WordsN<N> v;
#pragma unroll
  for (int w = 0; w < N; ++w) v.v[w] = Words<T>::add(a.v[w], b.v[w]);
  return v;
}

// N floats rounded to T and widened again, as `Words<T>::round` each, two to a conversion: the
// scalar bf16 conversion is an F2F on the slow conversion pipe, which bounds a quantizing tail
// at decode sizes.
template <typename T, int N>
__device__ __forceinline__ void round_pairs(float* f) {
  if constexpr (Words<T>::kPerWord == 2) {
#pragma unroll
    for (int e = 0; e < N; e += 2) Words<T>::unpack(Words<T>::pack(f + e), f + e);
  }
}

}  // namespace ir_cuda
