"""One model of the zoo as a user's own script would run it (GPU machine), for ``bench/zoo.py``.

    python bench/zoo_app.py MODEL [--steps N] [--compile] [--times FILE]
    torchrun --nproc-per-node 2 bench/zoo_app.py gpt2_ddp ...   (DDP on two GPUs)

Random weights, nothing downloaded. Training steps run bf16 autocast with a real optimizer
(AdamW); ``decode`` models run an inference loop of one token a step with a KV cache. Each
iteration is one ``torch_nsight.step()`` and the model is wrapped in ``instrument(model)``
(which installs nothing without a profiler). A CUDA event is recorded at the start of every
step and after the last; ``--times`` writes the start-to-start periods (ms) as JSON, and the
script prints ``zoo_app done: MODEL`` as its own last line.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch_nsight  # noqa: E402

Step = Callable[[int], object]  # returns the step's loss (None when it has none)
#: One step of a model, given the callable to run it through (the module, or its compiled
#: wrapper).
MakeStep = Callable[[Callable[..., object]], Step]


def _train(model: nn.Module, batch: Callable[[int], tuple], loss_of: Callable[..., torch.Tensor]
           ) -> MakeStep:
    def make(run: Callable[..., object]) -> Step:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

        def step(i: int) -> torch.Tensor:
            inputs = batch(i)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = loss_of(run, *inputs)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return loss

        return step

    return make


def _vision(name: str, size: int, batch: int, *, timm_model: bool) -> tuple[nn.Module, MakeStep]:
    if timm_model:
        import timm

        model = timm.create_model(name, num_classes=1000)
    else:
        import torchvision

        model = getattr(torchvision.models, name)(num_classes=1000)
    model = model.cuda().to(memory_format=torch.channels_last)
    x = torch.randn(batch, 3, size, size, device="cuda").to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device="cuda")
    return model, _train(model, lambda i: (x, y),
                         lambda m, a, b: nn.functional.cross_entropy(m(a), b))


def _causal_lm(config: object, batch: int, seq: int, vocab: int) -> tuple[nn.Module, MakeStep]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_config(config).cuda()
    ids = torch.randint(0, vocab, (batch, seq), device="cuda")
    return model, _train(model, lambda i: (ids,), lambda m, a: m(input_ids=a, labels=a).loss)


def build(name: str) -> tuple[nn.Module, MakeStep]:
    """The model and one step of it."""
    torch.manual_seed(0)
    if name == "vit_s":
        return _vision("vit_small_patch16_224", 224, 64, timm_model=True)
    if name == "convnext_t":
        return _vision("convnext_tiny", 224, 32, timm_model=True)
    if name == "convnext_t_tv":  # torchvision's: every block has its own stochastic depth
        return _vision("convnext_tiny", 224, 32, timm_model=False)
    if name == "resnet50":
        return _vision("resnet50", 224, 32, timm_model=False)
    if name == "efficientnet_b0":
        return _vision("efficientnet_b0", 224, 32, timm_model=False)
    if name in ("gpt2", "gpt2_ddp"):  # gpt2_ddp: under torchrun, DistributedDataParallel
        from transformers import GPT2Config

        return _causal_lm(GPT2Config(), 8, 512, 50257)
    if name == "bert":
        from transformers import BertConfig, BertForSequenceClassification

        model = BertForSequenceClassification(BertConfig()).cuda()
        ids = torch.randint(0, 30522, (16, 256), device="cuda")
        labels = torch.randint(0, 2, (16,), device="cuda")
        return model, _train(model, lambda i: (ids, labels),
                             lambda m, a, b: m(input_ids=a, labels=b).loss)
    if name == "t5":
        from transformers import T5Config, T5ForConditionalGeneration

        model = T5ForConditionalGeneration(T5Config(d_model=512, d_ff=2048, num_layers=6,
                                                    num_heads=8, decoder_start_token_id=0,
                                                    pad_token_id=0)).cuda()
        src = torch.randint(0, 32128, (16, 256), device="cuda")
        tgt = torch.randint(0, 32128, (16, 64), device="cuda")
        return model, _train(model, lambda i: (src, tgt),
                             lambda m, a, b: m(input_ids=a, labels=b).loss)
    if name == "roberta_ragged":
        from transformers import RobertaConfig, RobertaForMaskedLM

        model = RobertaForMaskedLM(RobertaConfig()).cuda()
        # ragged batches: each step its own sequence length (a padding-free loader)
        lengths = [96, 160, 224, 128, 192]
        batches = [torch.randint(5, 50265, (16, n), device="cuda") for n in lengths]
        return model, _train(model, lambda i: (batches[i % len(batches)],),
                             lambda m, a: m(input_ids=a, labels=a).loss)
    if name == "llama_decode":
        from transformers import LlamaConfig, LlamaForCausalLM

        config = LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                             num_attention_heads=16, num_key_value_heads=16, vocab_size=32000)
        model = LlamaForCausalLM(config).cuda().to(torch.bfloat16).eval()
        return model, _decode(model)
    raise SystemExit(f"zoo_app.py: unknown model {name}")


def _decode(model: nn.Module) -> MakeStep:
    """Greedy decoding, one token a step, after a 128-token prompt (static KV cache)."""
    from transformers import StaticCache

    prompt = torch.randint(0, 32000, (1, 128), device="cuda")
    cache = StaticCache(config=model.config, max_cache_len=1024)
    state: dict[str, torch.Tensor] = {}

    def make(run: Callable[..., object]) -> Step:
        @torch.no_grad()
        def step(i: int) -> None:
            if i % 256 == 0:  # a fresh prompt every 256 tokens keeps inside the cache
                cache.reset()
                out = model(input_ids=prompt, past_key_values=cache, use_cache=True,
                            cache_position=torch.arange(128, device="cuda"))
                state["next"] = out.logits[:, -1:].argmax(-1)
                state["pos"] = torch.tensor([128], device="cuda")
            out = run(input_ids=state["next"], past_key_values=cache, use_cache=True,
                      cache_position=state["pos"])
            state["next"] = out.logits[:, -1:].argmax(-1)  # type: ignore[attr-defined]
            state["pos"] = state["pos"] + 1

        return step

    return make


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--times", type=Path, default=None)
    args = parser.parse_args()
    ddp = args.model.endswith("_ddp")
    if ddp:  # one process per GPU (torchrun): NCCL all-reduces the gradients in backward
        import os

        torch.distributed.init_process_group("nccl")
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        if torch.distributed.get_rank() != 0:
            args.times = None
    model, make = build(args.model)
    torch_nsight.instrument(model)
    run: Callable[..., object] = model
    if ddp:
        from torch.nn.parallel import DistributedDataParallel

        run = DistributedDataParallel(model, device_ids=[torch.cuda.current_device()])
    step = make(torch.compile(run) if args.compile else run)
    events = []
    for i in range(args.steps):
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        events.append(event)
        with torch_nsight.step() as marked:
            loss = step(i)
            if loss is not None:  # compared by `profile --verify` (read after the steps)
                marked.record_loss(loss)
    end = torch.cuda.Event(enable_timing=True)
    end.record()
    events.append(end)
    torch.cuda.synchronize()
    periods = [a.elapsed_time(b) for a, b in zip(events, events[1:], strict=False)]
    if args.times is not None:
        args.times.write_text(json.dumps({"model": args.model, "compile": args.compile,
                                          "periods_ms": periods}))
    print(f"zoo_app done: {args.model}", flush=True)
    if ddp:
        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
