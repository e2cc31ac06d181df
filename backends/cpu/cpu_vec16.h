/* cpu_vec16.h — the native kernels' loads and stores of arrays in any
 * storage type (f32, f16, bf16) as float vectors (internal; see
 * cpu_native.h and cpu_vec.h, which this extends).
 *
 * Included by each instruction set's file after cpu_vec.h and the dialect
 * (for dlrt_half_to_float, dlrt_float_to_half and dlrt_float_to_bf16). A
 * 16-bit value widens exactly; a float narrows rounded to nearest even, as
 * the dialect's DLRT_LD_* / DLRT_ST_* do: so a native kernel that computes
 * the same floats as the dialect's stores the same bits. bf16 converts with
 * integer vector operations on every target, f16 with F16C where the target
 * has it (avx2, avx512) and the dialect's branch-free functions lane by lane
 * elsewhere (their results are the hardware's: dialect.h).
 *
 * The storage type of each macro is a dlrt_dtype constant (DLRT_F32,
 * DLRT_F16, DLRT_BF16), folded away where the kernels are instantiated per
 * type; p is the array's base (float or uint16_t elements) and i an element
 * index. */
#ifndef DLRT_BACKENDS_CPU_VEC16_H
#define DLRT_BACKENDS_CPU_VEC16_H

typedef uint16_t vh __attribute__((vector_size(VL * sizeof(uint16_t))));
typedef uint32_t vu __attribute__((vector_size(VL * sizeof(uint32_t))));

/* VL bf16 values from p; VL floats to bf16 at p (NaN stays a quiet NaN):
 * widening is a shift, narrowing adds 0x7fff plus the kept lowest bit
 * (round to nearest even) and takes the top half. AVX-512 and AVX2 spell
 * it in intrinsics (GCC's generic vectors shuffle the halves about). */
#if defined(__AVX512BW__)
#define vbf16_load(p)                                                          \
  ((vf)_mm512_castsi512_ps(_mm512_slli_epi32(                                  \
      _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(p))), 16)))
#define vbf16_store(p, v)                                                      \
  ({                                                                           \
    __m512i bu_ = _mm512_castps_si512((__m512)(v));                            \
    __m512i bh_ = _mm512_srli_epi32(bu_, 16);                                  \
    __m512i br_ = _mm512_srli_epi32(                                           \
        _mm512_add_epi32(bu_, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),      \
                                               _mm512_and_si512(bh_, _mm512_set1_epi32(1)))), \
        16);                                                                   \
    __mmask16 bn_ = _mm512_cmpgt_epu32_mask(                                   \
        _mm512_and_si512(bu_, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000)); \
    br_ = _mm512_mask_mov_epi32(br_, bn_, _mm512_or_si512(bh_, _mm512_set1_epi32(0x40))); \
    _mm256_storeu_si256((__m256i *)(void *)(p), _mm512_cvtepi32_epi16(br_));   \
  })
#elif defined(__AVX2__) && VL == 8
#define vbf16_load(p)                                                          \
  ((vf)_mm256_castsi256_ps(_mm256_slli_epi32(                                  \
      _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(p))), 16)))
#define vbf16_store(p, v)                                                      \
  ({                                                                           \
    __m256i bu_ = _mm256_castps_si256((__m256)(v));                            \
    __m256i bh_ = _mm256_srli_epi32(bu_, 16);                                  \
    __m256i br_ = _mm256_srli_epi32(                                           \
        _mm256_add_epi32(bu_, _mm256_add_epi32(_mm256_set1_epi32(0x7fff),      \
                                               _mm256_and_si256(bh_, _mm256_set1_epi32(1)))), \
        16);                                                                   \
    __m256i bn_ = _mm256_cmpgt_epi32(_mm256_and_si256(bu_, _mm256_set1_epi32(0x7fffffff)), \
                                     _mm256_set1_epi32(0x7f800000));           \
    br_ = _mm256_blendv_epi8(br_, _mm256_or_si256(bh_, _mm256_set1_epi32(0x40)), bn_); \
    __m256i bp_ = _mm256_permute4x64_epi64(_mm256_packus_epi32(br_, br_), 0x08); \
    _mm_storeu_si128((__m128i *)(void *)(p), _mm256_castsi256_si128(bp_));     \
  })
#else
#define vbf16_load(p)                                                          \
  ({                                                                           \
    vh bl_;                                                                    \
    memcpy(&bl_, (p), sizeof bl_);                                             \
    (vf)(__builtin_convertvector(bl_, vu) << 16);                              \
  })
#define vbf16_store(p, v)                                                      \
  ({                                                                           \
    vu bu_ = (vu)(v);                                                          \
    vu br_ = (bu_ + 0x7fffu + ((bu_ >> 16) & 1u)) >> 16;                       \
    vu bn_ = (vu)((bu_ & 0x7fffffffu) > 0x7f800000u);                          \
    br_ = (bn_ & ((bu_ >> 16) | 0x40u)) | (~bn_ & br_);                        \
    vh bs_ = __builtin_convertvector(br_, vh);                                 \
    (void)memcpy((p), &bs_, sizeof bs_);                                       \
  })
#endif

/* VL f16 values from p; VL floats to f16 at p. */
#if defined(__AVX512F__)
#define vf16_load(p) ((vf)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p))))
#define vf16_store(p, v)                                                       \
  _mm256_storeu_si256((__m256i *)(void *)(p),                                  \
                      _mm512_cvtps_ph((__m512)(v), _MM_FROUND_TO_NEAREST_INT | \
                                                       _MM_FROUND_NO_EXC))
#elif defined(__F16C__) && VL == 8
#define vf16_load(p) ((vf)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p))))
#define vf16_store(p, v)                                                       \
  _mm_storeu_si128((__m128i *)(void *)(p),                                     \
                   _mm256_cvtps_ph((__m256)(v), _MM_FROUND_TO_NEAREST_INT |    \
                                                    _MM_FROUND_NO_EXC))
#else
#define vf16_load(p)                                                           \
  ({                                                                           \
    const uint16_t *hp_ = (p);                                                 \
    float hf_[VL];                                                             \
    for (int l_ = 0; l_ < VL; l_++) hf_[l_] = dlrt_half_to_float(hp_[l_]);     \
    vf_load(hf_);                                                              \
  })
#define vf16_store(p, v)                                                       \
  ({                                                                           \
    uint16_t *hq_ = (p);                                                       \
    float hg_[VL];                                                             \
    vf_store(hg_, (v));                                                        \
    for (int l_ = 0; l_ < VL; l_++) hq_[l_] = dlrt_float_to_half(hg_[l_]);     \
  })
#endif

/* Element k of p as a float; x stored at element k of p. */
#define vt_get(p, type, k)                                                     \
  ((type) == DLRT_F32   ? ((const float *)(p))[k]                              \
   : (type) == DLRT_F16 ? dlrt_half_to_float(((const uint16_t *)(p))[k])       \
                        : dlrt_as_float((uint32_t)((const uint16_t *)(p))[k] << 16))
#define vt_put(p, type, k, x)                                                  \
  ({                                                                           \
    float px_ = (x);                                                           \
    if ((type) == DLRT_F32) ((float *)(p))[k] = px_;                           \
    else if ((type) == DLRT_F16) ((uint16_t *)(p))[k] = dlrt_float_to_half(px_); \
    else ((uint16_t *)(p))[k] = dlrt_float_to_bf16(px_);                       \
  })

/* VL values of p from element i as floats; VL floats stored from element i. */
#define vt_load(p, type, i)                                                    \
  ((type) == DLRT_F32   ? vf_load((const float *)(p) + (i))                    \
   : (type) == DLRT_F16 ? vf16_load((const uint16_t *)(p) + (i))               \
                        : vbf16_load((const uint16_t *)(p) + (i)))
#define vt_store(p, type, i, v)                                                \
  ({                                                                           \
    if ((type) == DLRT_F32) vf_store((float *)(p) + (i), (v));                 \
    else if ((type) == DLRT_F16) vf16_store((uint16_t *)(p) + (i), (v));       \
    else vbf16_store((uint16_t *)(p) + (i), (v));                              \
  })

/* The first n (<= VL) values of p from element i, the other lanes `fill`;
 * the first n lanes of v stored from element i. */
#define vt_load_n(p, type, i, n, fill)                                         \
  ({                                                                           \
    int64_t ln_ = (n), li_ = (i);                                              \
    vf lv_;                                                                    \
    if (ln_ == VL) {                                                           \
      lv_ = vt_load((p), type, li_);                                           \
    } else {                                                                   \
      float lt_[VL];                                                           \
      for (int l_ = 0; l_ < VL; l_++) lt_[l_] = l_ < ln_ ? vt_get((p), type, li_ + l_) : (fill); \
      lv_ = vf_load(lt_);                                                      \
    }                                                                          \
    lv_;                                                                       \
  })
#define vt_store_n(p, type, i, v, n)                                           \
  ({                                                                           \
    int64_t sn_ = (n), si_ = (i);                                              \
    vf sv_ = (v);                                                              \
    if (sn_ == VL) {                                                           \
      vt_store((p), type, si_, sv_);                                           \
    } else {                                                                   \
      float st_[VL];                                                           \
      vf_store(st_, sv_);                                                      \
      for (int l_ = 0; l_ < sn_; l_++) vt_put((p), type, si_ + l_, st_[l_]);   \
    }                                                                          \
  })

/* RL_AT (cpu_vec.h) for a row q of storage type `type`. */
#define RL_AT_T(q, type, fill) vt_load_n((q), type, at_, m_, (fill))

#endif
