// The widest vectors the data kernels with hand-written AVX-512 paths (the resize, its rounding to
// bytes, the normaliser's lookup, the colour jitter's blends) may use, as ATen's own cap says:
// ATEN_CPU_CAPABILITY=avx2 or =default (set to stand a CPU in for an older one, with oneDNN's
// ONEDNN_MAX_CPU_ISA) caps them too, so one setting runs torch and these kernels on the older paths. (The loops compiled by
// TRAINER_VECTOR_CLONES pick AVX2 or the baseline by the CPU alone: they have no AVX-512 copy.)
#pragma once

#include <string>

namespace trainer::data {

// In floats: 16 (no cap), 8 (avx2) or 4 (default: the x86-64 baseline). Read once.
int vector_cap_floats();

// The paths the data kernels of a pipeline take on this CPU, for a benchmark's header: "resize
// AVX-512, normaliser AVX512-VBMI permutes", then ", colour jitter AVX-512" when the pipeline
// blends (brightness, contrast, saturation) and ", hue AVX-512" when it shifts hues.
std::string kernel_paths(bool jitter, bool hue);

}  // namespace trainer::data
