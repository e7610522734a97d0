// Exact (erf) GELU, y = x Φ(x), on bf16 values in place: each computed in fp32 and rounded once to bf16. Φ from erfc
// by Abramowitz & Stegun's 7.1.26 (|error| <= 1.5e-7; the form LibTorch's and oneDNN's CPU GELU use), e^x as
// models/cpu_vector.h computes it. Every output is within one bf16 step of the correctly rounded GELU of its input
// for |x| < 6.5 (beyond, the values are below 1e-9 in magnitude or x itself). 16 lanes at a time with AVX-512 where
// the processor has it, one value at a time otherwise.
#pragma once

#include <cstdint>

#include <torch/torch.h>

namespace joule::models {

// x[0..n) in place (bf16 bit patterns).
void gelu_bf16_row(uint16_t* x, int64_t n);

// A contiguous bf16 CPU tensor in place, rows of its last dimension split among the threads.
void gelu_bf16_(const torch::Tensor& x);

}  // namespace joule::models
