// Exact (erf) GELU, y = x Φ(x), on bf16 values in place. A bf16 value has 65,536 possible bit patterns, so the
// function is a table: each entry computed once in double precision (0.5 x erfc(-x / sqrt 2)) and rounded to bf16
// (through fp32, to nearest even). Every output is the exact GELU of its input so rounded, on every processor, and a
// lookup per value is twice as fast here as 16-lane AVX-512 arithmetic with a polynomial erfc (0.23 against 0.48 ns
// per value, one core of the Intel Xeon with AMX).
#pragma once

#include <cstdint>

#include <torch/torch.h>

namespace joule::models {

// x[0..n) in place (bf16 bit patterns).
void gelu_bf16_row(uint16_t* x, int64_t n);

// A contiguous bf16 CPU tensor in place, rows of its last dimension split among the threads.
void gelu_bf16_(const torch::Tensor& x);

// GELU of a contiguous bf16 CPU tensor into a new one (x is kept: training's backward needs it).
torch::Tensor gelu_bf16(const torch::Tensor& x);

// Training's backward of GELU at a contiguous bf16 CPU x [..., n], for the incoming gradient dy (x's shape, bf16):
// dy GELU'(x), rounded to bf16 once, where GELU'(x) = Φ(x) + x φ(x) is a table again (65,536 floats, each computed
// in double precision and rounded to fp32; NaN at ±inf, as LibTorch's formula gives). With `column_sums` (fp32 [n],
// zeros or what to add to) it also adds each column of that bf16 gradient into it in fp32, rows in order: the bias
// gradient of the Linear before the GELU, in the same pass, the same sums sum_rows_fp32 forms. Columns in tiles of
// 256 among the threads: the same result at any thread count.
torch::Tensor gelu_backward_bf16(const torch::Tensor& dy, const torch::Tensor& x, torch::Tensor* column_sums);

}  // namespace joule::models
