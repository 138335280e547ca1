"""Words for the analysis's codes that more than one sentence of :mod:`.finding_words` uses:
a dimension's role, what an elementwise chain computes, how an optimizer's step ran."""

from __future__ import annotations

#: A GEMM or convolution dimension's role in words.
ROLE_SAID = {"tokens": "batch x sequence", "out_features": "output features",
             "in_features": "input features", "in_channels": "input channels",
             "out_channels": "output channels", "spatial": "output positions H x W",
             "sequence": "the attention's sequence length"}
#: What an elementwise chain computes in words.
CHAIN_SAID = {"rms_norm": " (an RMSNorm written out)", "layer_norm": " (a LayerNorm written "
              "out)", "rotary": " (a rotary embedding)", "gelu": " (a tanh GELU written out)",
              "softmax": " (masking and softmax)",
              "loss": " (the loss: upcast, log-softmax, NLL)"}
#: How an optimizer's step ran, in words.
IMPL_SAID = {"foreach": "one multi-tensor kernel per op (foreach)",
             "for_loop": "kernels per parameter (a for-loop)"}
#: The fix of a misaligned sequence length in attention written out (``gemm_misaligned``,
#: ``use_sdpa``): the chain's "at least F.softmax" says nothing to a model that has it.
SDPA_FOR_GEMM = ("Use F.scaled_dot_product_attention for this attention: one kernel for the "
                 "scores, the softmax and the weighted sum at any sequence length, no padding "
                 "of the scores needed; or torch.compile the module.")
#: A data-dependent op (``step_idle.DATA_DEPENDENT_OPS``) as the words call it; others by name.
OP_SAID = {"index_mask": "x[mask]", "nms": "NMS"}
