// Anchor for the precompiled <torch/torch.h> that every LibTorch-using target reuses.
