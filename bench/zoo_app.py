"""One model of the zoo as a user's own script would run it (GPU machine), for ``bench/zoo.py``.

    python bench/zoo_app.py MODEL [--steps N] [--compile | --compile-method] [--times FILE]
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


def _train(model: nn.Module, batch: Callable[[int], tuple], loss_of: Callable[..., torch.Tensor],
           make_optimizer: Callable[..., torch.optim.Optimizer] | None = None) -> MakeStep:
    def make(run: Callable[..., object]) -> Step:
        optimizer = (make_optimizer(model.parameters()) if make_optimizer is not None
                     else torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True))

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


def _loop(model: nn.Module, batch: Callable[[int], tuple], forward: Callable[..., torch.Tensor],
          *, optimizer: Callable[..., torch.optim.Optimizer], dtype: torch.dtype | None,
          scaler: bool = False, clip: float | None = None) -> MakeStep:
    """A training loop as most are written: the model returns logits; the loss, the
    GradScaler's scaling and unscaling and the gradient clipping run outside the model."""

    def make(run: Callable[..., object]) -> Step:
        opt = optimizer(model.parameters())
        grad_scaler = torch.amp.GradScaler("cuda") if scaler else None

        def step(i: int) -> torch.Tensor:
            inputs, target = batch(i)
            with torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
                out = forward(run, *inputs)
            loss = nn.functional.cross_entropy(out.float().flatten(0, -2), target.flatten())
            if grad_scaler is not None:
                grad_scaler.scale(loss).backward()
                grad_scaler.unscale_(opt)
            else:
                loss.backward()
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            if grad_scaler is not None:
                grad_scaler.step(opt)
                grad_scaler.update()
            else:
                opt.step()
            opt.zero_grad(set_to_none=True)
            return loss

        return step

    return make


class _RecurrentLM(nn.Module):
    """Embedding, a recurrent stack (``nn.LSTM`` or ``nn.GRU``), a vocabulary head."""

    def __init__(self, cell: type[nn.Module], vocab: int, embed: int, hidden: int,
                 layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.rnn = cell(embed, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.embed(ids))
        return self.head(out)


def _recurrent_lm(cell: type[nn.Module], vocab: int, embed: int, hidden: int, batch: int,
                  seq: int, optimizer: Callable[..., torch.optim.Optimizer]
                  ) -> tuple[nn.Module, MakeStep]:
    model = _RecurrentLM(cell, vocab, embed, hidden, 2).cuda()
    ids = torch.randint(0, vocab, (batch, seq + 1), device="cuda")
    return model, _loop(model, lambda i: ((ids[:, :-1],), ids[:, 1:]), lambda m, a: m(a),
                        optimizer=optimizer, dtype=torch.float16, scaler=True, clip=0.25)


class _Graph(nn.Module):
    """Two message-passing layers of torch_geometric (``GATConv``, ``GINConv`` or
    ``SAGEConv``)."""

    def __init__(self, conv: str, features: int, hidden: int, classes: int) -> None:
        super().__init__()
        import torch_geometric.nn as gnn

        if conv == "gat":
            self.conv1 = gnn.GATConv(features, hidden // 4, heads=4)
            self.conv2 = gnn.GATConv(hidden, classes, heads=1)
        elif conv == "gin":  # sum aggregation, then an MLP with a batch norm
            def mlp(a: int, b: int) -> nn.Module:
                return nn.Sequential(nn.Linear(a, b), nn.BatchNorm1d(b), nn.ReLU(),
                                     nn.Linear(b, b))
            self.conv1 = gnn.GINConv(mlp(features, hidden))
            self.conv2 = gnn.GINConv(mlp(hidden, classes))
        else:
            self.conv1 = gnn.SAGEConv(features, hidden)
            self.conv2 = gnn.SAGEConv(hidden, classes)

    def forward(self, x: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
        return self.conv2(nn.functional.elu(self.conv1(x, edges)), edges)


def _graph(conv: str, nodes: int, edges: int) -> tuple[nn.Module, MakeStep]:
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    model = _Graph(conv, 128, 256, 40).cuda()
    x = torch.randn(nodes, 128, device="cuda")
    index = torch.randint(0, nodes, (2, edges), device="cuda")
    y = torch.randint(0, 40, (nodes,), device="cuda")
    return model, _loop(model, lambda i: ((x, index), y), lambda m, a, b: m(a, b),
                        optimizer=lambda p: torch.optim.Adam(p, lr=1e-3), dtype=None,
                        clip=1.0 if conv == "sage" else None)


def _vision(name: str, size: int, batch: int, *, timm_model: bool, nchw: bool = False,
            optimizer: Callable[..., torch.optim.Optimizer] | None = None
            ) -> tuple[nn.Module, MakeStep]:
    if timm_model:
        import timm

        model = timm.create_model(name, num_classes=1000)
    else:
        import torchvision

        model = getattr(torchvision.models, name)(num_classes=1000)
    layout = torch.contiguous_format if nchw else torch.channels_last
    model = model.cuda().to(memory_format=layout)
    x = torch.randn(batch, 3, size, size, device="cuda").to(memory_format=layout)
    y = torch.randint(0, 1000, (batch,), device="cuda")
    return model, _train(model, lambda i: (x, y),
                         lambda m, a, b: nn.functional.cross_entropy(m(a), b), optimizer)


def _segmentation(batch: int, size: int) -> tuple[nn.Module, MakeStep]:
    """torchvision's DeepLabV3 on MobileNetV3 (dilated depthwise convolutions), NCHW, a
    per-pixel cross-entropy, SGD with momentum; no weights downloaded."""
    from torchvision.models.segmentation import deeplabv3_mobilenet_v3_large

    model = deeplabv3_mobilenet_v3_large(weights=None, weights_backbone=None,
                                         num_classes=21).cuda()
    x = torch.randn(batch, 3, size, size, device="cuda")
    y = torch.randint(0, 21, (batch, size, size), device="cuda")
    return model, _train(model, lambda i: (x, y),
                         lambda m, a, b: nn.functional.cross_entropy(m(a)["out"], b),
                         lambda p: torch.optim.SGD(p, lr=0.02, momentum=0.9))


class _Conformer(nn.Module):
    """Filter-bank frames to a torchaudio Conformer (depthwise 1-D convolutions, batch norm,
    attention) to 32 CTC classes; returns (logits, lengths) as wav2vec 2.0 does."""

    def __init__(self) -> None:
        import torchaudio

        super().__init__()
        self.front = nn.Linear(80, 256)
        self.encoder = torchaudio.models.Conformer(input_dim=256, num_heads=4, ffn_dim=1024,
                                                   num_layers=8, depthwise_conv_kernel_size=31)
        self.head = nn.Linear(256, 32)

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        lengths = torch.full((features.shape[0],), features.shape[1], dtype=torch.long,
                             device=features.device)
        out, lengths = self.encoder(self.front(features), lengths)
        return self.head(out), lengths


def _causal_lm(config: object, batch: int, seq: int, vocab: int,
               optimizer: Callable[..., torch.optim.Optimizer] | None = None
               ) -> tuple[nn.Module, MakeStep]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_config(config).cuda()
    ids = torch.randint(0, vocab, (batch, seq), device="cuda")
    return model, _train(model, lambda i: (ids,), lambda m, a: m(input_ids=a, labels=a).loss,
                         optimizer)


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
    if name == "efficientnet_nchw":  # NCHW, as torchvision's examples train it
        return _vision("efficientnet_b0", 224, 32, timm_model=False, nchw=True)
    if name == "mobilenet_v3":  # NCHW, SGD with momentum (torchvision's recipe)
        return _vision("mobilenet_v3_large", 224, 64, timm_model=False, nchw=True,
                       optimizer=lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9))
    if name == "regnet_y":  # NCHW, grouped convolutions, SGD with Nesterov momentum
        return _vision("regnet_y_800mf", 224, 64, timm_model=False, nchw=True,
                       optimizer=lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9,
                                                           nesterov=True))
    if name == "swin_t":  # windowed attention; AdamW as torchvision trains it (foreach)
        return _vision("swin_t", 224, 32, timm_model=False, nchw=True,
                       optimizer=lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.05))
    if name == "deeplab":
        return _segmentation(8, 320)
    if name == "conformer":  # torchaudio's Conformer; CTC loss and clipping outside it
        model = _Conformer().cuda()
        features = torch.randn(8, 400, 80, device="cuda")
        targets = torch.randint(1, 32, (8, 60), device="cuda")
        return model, _ctc(model, features, targets)
    if name == "lstm_lm":  # loss, GradScaler and clipping outside the model; plain SGD
        return _recurrent_lm(nn.LSTM, 10000, 512, 1024, 32, 128,
                             lambda p: torch.optim.SGD(p, lr=1.0))
    if name == "gru_lm":  # the same loop; Adam (its default, foreach, implementation)
        return _recurrent_lm(nn.GRU, 16000, 384, 768, 16, 96,
                             lambda p: torch.optim.Adam(p, lr=1e-3))
    if name == "gat":
        return _graph("gat", 100_000, 1_000_000)
    if name == "sage":
        return _graph("sage", 50_000, 500_000)
    if name == "gin":  # torch_geometric GINConv, TF32 on, Adam
        return _graph("gin", 100_000, 1_000_000)
    if name == "shufflenet":  # NCHW, channel shuffles, SGD with momentum and weight decay
        return _vision("shufflenet_v2_x1_0", 224, 128, timm_model=False, nchw=True,
                       optimizer=lambda p: torch.optim.SGD(p, lr=0.5, momentum=0.9,
                                                           weight_decay=4e-5))
    if name == "llama_train":  # RMSNorm, rotary, SwiGLU; AdamW as most scripts make it
        from transformers import LlamaConfig

        config = LlamaConfig(hidden_size=768, intermediate_size=2048, num_hidden_layers=6,
                             num_attention_heads=12, num_key_value_heads=4, vocab_size=32000)
        return _causal_lm(config, 8, 512, 32000,
                          lambda p: torch.optim.AdamW(p, lr=3e-4, weight_decay=0.1))
    if name == "gpt_neox":  # parallel attention and MLP, partial rotary; AdamW, foreach
        from transformers import GPTNeoXConfig

        config = GPTNeoXConfig(hidden_size=768, intermediate_size=3072, num_hidden_layers=6,
                               num_attention_heads=12, vocab_size=50304)
        return _causal_lm(config, 8, 512, 50304,
                          lambda p: torch.optim.AdamW(p, lr=3e-4, weight_decay=0.1))
    if name == "densenet121":  # NCHW, a concatenation per layer, SGD with momentum
        return _vision("densenet121", 224, 32, timm_model=False, nchw=True,
                       optimizer=lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9,
                                                           weight_decay=1e-4))
    if name == "resnext50":  # NCHW, grouped 3x3 convolutions (32 groups), SGD with momentum
        return _vision("resnext50_32x4d", 224, 32, timm_model=False, nchw=True,
                       optimizer=lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9,
                                                           weight_decay=1e-4))
    if name == "mnasnet":  # NCHW, depthwise inverted residuals, SGD with momentum
        return _vision("mnasnet1_0", 224, 64, timm_model=False, nchw=True,
                       optimizer=lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9))
    if name == "distilbert":  # an encoder classifier, Adam (foreach)
        from transformers import DistilBertConfig, DistilBertForSequenceClassification

        model = DistilBertForSequenceClassification(DistilBertConfig()).cuda()
        ids = torch.randint(0, 30522, (32, 256), device="cuda")
        labels = torch.randint(0, 2, (32,), device="cuda")
        return model, _train(model, lambda i: (ids, labels),
                             lambda m, a, b: m(input_ids=a, labels=b).loss,
                             lambda p: torch.optim.Adam(p, lr=5e-5))
    if name == "qwen2_moe":  # experts and a shared expert, Hugging Face's own MoE code
        from transformers import Qwen2MoeConfig

        return _causal_lm(Qwen2MoeConfig(hidden_size=512, intermediate_size=1024,
                                         moe_intermediate_size=512,
                                         shared_expert_intermediate_size=1024,
                                         num_hidden_layers=4, num_attention_heads=8,
                                         num_key_value_heads=4, num_experts=16,
                                         num_experts_per_tok=4, vocab_size=32000), 8, 256, 32000)
    if name == "mixtral_moe":
        from transformers import MixtralConfig

        return _causal_lm(MixtralConfig(hidden_size=512, intermediate_size=1024,
                                        num_hidden_layers=4, num_attention_heads=8,
                                        num_key_value_heads=8, num_local_experts=8,
                                        num_experts_per_tok=2, vocab_size=32000), 8, 256, 32000)
    if name == "olmoe":  # OLMoE's block: 16 experts, top-4, no shared expert; AdamW fused
        from transformers import OlmoeConfig

        return _causal_lm(OlmoeConfig(hidden_size=512, intermediate_size=1024,
                                      num_hidden_layers=4, num_attention_heads=8,
                                      num_key_value_heads=8, num_experts=16,
                                      num_experts_per_tok=4, vocab_size=50304), 8, 256, 50304)
    if name == "deepseek_v3":  # multi-head latent attention, 16 routed experts and a shared one
        from transformers import DeepseekV3Config

        return _causal_lm(DeepseekV3Config(
            hidden_size=512, intermediate_size=1024, moe_intermediate_size=512,
            num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=8,
            n_shared_experts=1, n_routed_experts=16, num_experts_per_tok=4, n_group=1,
            topk_group=1, first_k_dense_replace=1, q_lora_rank=256, kv_lora_rank=128,
            qk_rope_head_dim=32, qk_nope_head_dim=32, v_head_dim=64, vocab_size=32000),
            8, 256, 32000)
    if name == "whisper_s":
        from transformers import WhisperConfig, WhisperForConditionalGeneration

        model = WhisperForConditionalGeneration(WhisperConfig(
            d_model=384, encoder_layers=4, decoder_layers=4, encoder_attention_heads=6,
            decoder_attention_heads=6, encoder_ffn_dim=1536, decoder_ffn_dim=1536)).cuda()
        features = torch.randn(8, 80, 3000, device="cuda")
        labels = torch.randint(0, 51865, (8, 128), device="cuda")
        return model, _train(model, lambda i: (features, labels),
                             lambda m, a, b: m(input_features=a, labels=b).loss)
    if name == "wav2vec2":  # torchaudio's; CTC loss and clipping outside the model
        import torchaudio

        model = torchaudio.models.wav2vec2_base(aux_num_out=32).cuda()
        wave = torch.randn(8, 32000, device="cuda")
        targets = torch.randint(1, 32, (8, 40), device="cuda")
        return model, _ctc(model, wave, targets)
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
    from zoo_families import FAMILIES  # four families more, set to verify (2026-11-29)

    if name in FAMILIES:
        return FAMILIES[name]()
    raise SystemExit(f"zoo_app.py: unknown model {name}")


def _ctc(model: nn.Module, wave: torch.Tensor, targets: torch.Tensor) -> MakeStep:
    """A speech loop: the model gives frame logits; CTC loss and clipping outside it."""

    def make(run: Callable[..., object]) -> Step:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step(i: int) -> torch.Tensor:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits, _ = run(wave)  # type: ignore[misc]
            log_probs = logits.float().log_softmax(-1).transpose(0, 1)
            frames = torch.full((wave.shape[0],), log_probs.shape[0], dtype=torch.long,
                                device="cuda")
            lengths = torch.full((wave.shape[0],), targets.shape[1], dtype=torch.long,
                                 device="cuda")
            loss = nn.functional.ctc_loss(log_probs, targets, frames, lengths)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss

        return step

    return make


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
    parser.add_argument("--compile", action="store_true", help="torch.compile(model)")
    parser.add_argument("--compile-method", action="store_true",
                        help="model.compile(): the module compiled in place")
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
    if args.compile_method:
        model.compile()
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
