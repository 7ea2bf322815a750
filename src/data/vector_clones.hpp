// TRAINER_VECTOR_CLONES: a hot loop compiled twice, for AVX2 and for the baseline x86-64, the copy
// picked at run time by the CPU (GCC's target_clones), with GCC's dynamic vector cost model (its
// -O2 "very cheap" model leaves such loops scalar). No FMA: the AVX2 target does not include it, so
// float sums keep the baseline's rounding and every CPU gives the same bytes.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TRAINER_VECTOR_CLONES __attribute__((target_clones("avx2", "default"), optimize("vect-cost-model=dynamic")))
#else
#define TRAINER_VECTOR_CLONES
#endif
