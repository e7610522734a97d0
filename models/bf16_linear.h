// The bf16 Linear layer of training on the CPU, from its fp32 master weight: y = x W^T + b with the weight cast to
// bf16 on the way in and the bias added inside oneDNN's GEMM (no separate pass over y); backward computes the weight
// gradient in fp32 from the bf16 operands and has the GEMM add it straight into the weight's fp32 .grad when it has
// one (the gradient buckets' views: no bf16 dW written, cast and added), and sums the bias gradient over rows in fp32
// from the bf16 dy in one pass. dx = dy W stays LibTorch's bf16 GEMM. The parameter's accumulator then gets no tensor
// to add and still runs its post hooks (the gradient reducer marks the parameter ready there). A weight ZeRO-1 holds
// in bf16 is used as it is and gets a bf16 gradient. Inference (no autograd) holds bf16 weights and biases and runs
// each Linear as one GEMM, GELU included.
#pragma once

#include <torch/torch.h>

namespace joule::models {

// Whether bf16_linear takes these operands: a bf16 CPU input, an fp32 or bf16 CPU weight, an fp32 or bf16 bias or
// none, and a joule built with oneDNN. Otherwise PrecisionOps::linear keeps LibTorch's composition.
bool bf16_linear_applies(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

enum class Activation { kNone, kGelu };  // kGelu: exact (erf) GELU, as torch::gelu

// act(x W^T + b): x [..., in] bf16, weight [out, in] fp32 or bf16, bias [out] fp32, bf16 or undefined: [..., out]
// bf16, differentiable in all three. Where autograd records nothing (inference) it is one GEMM with the bias and the
// GELU in its epilogue, applied to the fp32 accumulator before the one rounding to bf16; while autograd records, GELU
// is torch::gelu on the bf16 output (its backward needs that output).
torch::Tensor bf16_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                          Activation activation = Activation::kNone);

}  // namespace joule::models
