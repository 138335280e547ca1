"""A compiled training loop of the tiny encoder-decoder (``encoder_decoder.py``, graph
breaks of its own) for ``test_compiled_program.py``'s dry run: ``python
compiled_seq2seq.py``, with ``torch_nsight.instrument(model)`` (active under ``torch-nsight
profile`` only) and the model compiled whole, called with keyword arguments. After each step
it prints, inside the step, what Dynamo did so far (``step I: instrumented B, recompiles R, graph breaks G,
graphs N, frames F``)."""

from __future__ import annotations

import sys

import torch
from encoder_decoder import EncoderDecoder, batch
from torch._dynamo.utils import counters, get_compilation_metrics

import torch_nsight


def main() -> int:
    device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    torch.manual_seed(0)
    model = EncoderDecoder(graph_break=True).to(device)
    handle = torch_nsight.instrument(model)
    compiled = torch.compile(model, backend="inductor" if device == "cuda" else "aot_eager")
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    for index in range(6):
        with torch_nsight.step():
            features, labels = (t.to(device) for t in batch(index))
            compiled(input_features=features, labels=labels)["loss"].backward()
            optimizer.step()
            optimizer.zero_grad()
            # inside the step: a dry run stops the script as soon as its last chosen step ends
            metrics = get_compilation_metrics()
            recompiles = sum(m.recompile_reason is not None for m in metrics)
            print(f"step {index}: instrumented {handle.active}, recompiles {recompiles}, "
                  f"graph breaks {sum(counters['graph_break'].values())}, "
                  f"graphs {counters['stats']['unique_graphs']}, "
                  f"frames {sum(1 for m in metrics if m.co_name)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
