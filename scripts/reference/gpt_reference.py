#!/usr/bin/python3
"""Reference GPT in PyTorch (float64) for collage's model tests.

An independent implementation of collage's GPT (src/model/gpt.h: pre-LayerNorm, GELU tanh,
causal multi-head attention with a fused [q | k | v] projection, learned or rotary
positions, tied or untied head, biases everywhere except the head, vocab padded to a
multiple of 128 and ignored by the loss). For each variant {learned, rope} x {tied,
untied} it writes tests/fixtures/gpt_<pos>_<head>.bin holding the config, the weights
(rounded to bf16-representable values, so collage's bf16 model starts from identical
weights), tokens, targets (one ignored, -1), the mean loss, the logits and the gradient
of the mean loss for every parameter.

Regenerate (Debian's python3-torch, CPU only; deterministic):
    /usr/bin/python3 scripts/reference/gpt_reference.py [--out-dir tests/fixtures]

File format (little-endian): magic b"CLGFIX01", uint32 entry count, then per entry:
uint32 name length, name (UTF-8), uint32 ndim, int64 dims[ndim], float32 data (row-major).
"""
import argparse
import math
import os
import struct

import torch

# Tiny on purpose: every fixture stays well under 1 MB.
CONFIG = dict(n_layer=2, hidden=32, n_head=4, ffn=128, vocab=300, max_pos=16, batch=2, seq=16,
              rope_base=10000.0, eps=1e-5)


def padded_vocab(vocab, multiple=128):
    return (vocab + multiple - 1) // multiple * multiple


def to_bf16_values(x):
    """Nearest-even bf16 rounding (via float32), kept in float64."""
    return x.to(torch.float32).to(torch.bfloat16).to(torch.float64)


def make_parameters(gen, rope, tied):
    """Named float64 tensors in collage's parameter-table order (PyTorch [out, in] shapes).
    Random biases and layernorm weights != 1 so that every tensor's layout is exercised."""
    c = CONFIG
    C, F, Vp = c["hidden"], c["ffn"], padded_vocab(c["vocab"])

    def normal(shape, std, mean=0.0):
        return to_bf16_values(mean + std * torch.randn(shape, generator=gen, dtype=torch.float64))

    p = {"wte.weight": normal((Vp, C), 0.2)}  # padding rows random too: the loss ignores them
    if not rope:
        p["wpe.weight"] = normal((c["max_pos"], C), 0.2)
    for l in range(c["n_layer"]):
        h = f"h.{l}."
        p[h + "ln_1.weight"] = normal((C,), 0.1, 1.0)
        p[h + "ln_1.bias"] = normal((C,), 0.1)
        p[h + "attn.qkv.weight"] = normal((3 * C, C), 1 / math.sqrt(C))
        p[h + "attn.qkv.bias"] = normal((3 * C,), 0.1)
        p[h + "attn.proj.weight"] = normal((C, C), 1 / math.sqrt(C))
        p[h + "attn.proj.bias"] = normal((C,), 0.1)
        p[h + "ln_2.weight"] = normal((C,), 0.1, 1.0)
        p[h + "ln_2.bias"] = normal((C,), 0.1)
        p[h + "mlp.fc1.weight"] = normal((F, C), 1 / math.sqrt(C))
        p[h + "mlp.fc1.bias"] = normal((F,), 0.1)
        p[h + "mlp.fc2.weight"] = normal((C, F), 1 / math.sqrt(F))
        p[h + "mlp.fc2.bias"] = normal((C,), 0.1)
    p["ln_f.weight"] = normal((C,), 0.1, 1.0)
    p["ln_f.bias"] = normal((C,), 0.1)
    if not tied:
        p["lm_head.weight"] = normal((Vp, C), 0.2)
    return p


def layer_norm(x, weight, bias):
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # biased, as LayerNorm
    return (x - mean) / torch.sqrt(var + CONFIG["eps"]) * weight + bias


def gelu_tanh(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def rotary(x):
    """GPT-NeoX rotate-half RoPE on (B, NH, T, HS): pair (i, i + HS/2) turns by t·base^(-2i/HS)."""
    T, HS = x.shape[-2], x.shape[-1]
    inv_freq = CONFIG["rope_base"] ** (-torch.arange(0, HS // 2, dtype=torch.float64) * 2 / HS)
    angle = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None, :]  # (T, HS/2)
    cos, sin = torch.cos(angle).repeat(1, 2), torch.sin(angle).repeat(1, 2)
    first, second = x[..., : HS // 2], x[..., HS // 2 :]
    rotated_half = torch.cat([-second, first], dim=-1)
    return x * cos + rotated_half * sin


def attention(qkv, rope):
    B, T, _ = qkv.shape
    C, NH = CONFIG["hidden"], CONFIG["n_head"]
    HS = C // NH
    q, k, v = (t.reshape(B, T, NH, HS).transpose(1, 2) for t in qkv.split(C, dim=-1))
    if rope:
        q, k = rotary(q), rotary(k)
    scores = q @ k.transpose(-2, -1) / math.sqrt(HS)  # (B, NH, T, T)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    scores = scores.masked_fill(~causal, float("-inf"))
    y = torch.softmax(scores, dim=-1) @ v  # (B, NH, T, HS)
    return y.transpose(1, 2).reshape(B, T, C)


def forward(p, tokens, targets, rope, tied):
    """Returns (mean loss over targets != -1, logits (B*T, Vp))."""
    T = tokens.shape[1]
    x = p["wte.weight"][tokens]
    if not rope:
        x = x + p["wpe.weight"][:T]
    for l in range(CONFIG["n_layer"]):
        h = lambda name: p[f"h.{l}.{name}"]  # noqa: E731
        a = layer_norm(x, h("ln_1.weight"), h("ln_1.bias"))
        qkv = a @ h("attn.qkv.weight").T + h("attn.qkv.bias")
        x = x + attention(qkv, rope) @ h("attn.proj.weight").T + h("attn.proj.bias")
        m = layer_norm(x, h("ln_2.weight"), h("ln_2.bias"))
        m = gelu_tanh(m @ h("mlp.fc1.weight").T + h("mlp.fc1.bias"))
        x = x + m @ h("mlp.fc2.weight").T + h("mlp.fc2.bias")
    x = layer_norm(x, p["ln_f.weight"], p["ln_f.bias"])
    head = p["wte.weight"] if tied else p["lm_head.weight"]
    logits = (x @ head.T).reshape(-1, head.shape[0])  # (B*T, Vp)
    V = CONFIG["vocab"]
    flat_targets = targets.reshape(-1)
    rows = (flat_targets >= 0).nonzero().squeeze(1)  # ignored targets (-1) drop out
    log_probs = torch.log_softmax(logits[:, :V], dim=-1)  # padding columns excluded
    token_losses = -log_probs[rows, flat_targets[rows]]
    return token_losses.mean(), logits


def write_fixture(path, entries):
    with open(path, "wb") as f:
        f.write(b"CLGFIX01")
        f.write(struct.pack("<I", len(entries)))
        for name, tensor in entries:
            data = tensor.detach().to(torch.float32).contiguous()
            encoded = name.encode()
            f.write(struct.pack("<I", len(encoded)) + encoded)
            f.write(struct.pack("<I", data.dim()))
            f.write(struct.pack(f"<{data.dim()}q", *data.shape))
            f.write(data.numpy().astype("<f4").tobytes())


def make_variant(rope, tied, seed):
    c = CONFIG
    gen = torch.Generator().manual_seed(seed)
    params = make_parameters(gen, rope, tied)
    tokens = torch.randint(0, c["vocab"], (c["batch"], c["seq"]), generator=gen)
    targets = torch.randint(0, c["vocab"], (c["batch"], c["seq"]), generator=gen)
    tokens[0, 3] = c["vocab"] - 1  # the last real id, next to the padding
    targets[1, 7] = c["vocab"] - 1
    targets[0, 5] = -1  # ignored
    for t in params.values():
        t.requires_grad_(True)
    loss, logits = forward(params, tokens, targets, rope, tied)
    loss.backward()

    config = torch.tensor([c["n_layer"], c["hidden"], c["n_head"], c["ffn"], c["vocab"],
                           c["max_pos"], int(rope), int(tied), c["batch"], c["seq"],
                           c["rope_base"], c["eps"]], dtype=torch.float64)
    entries = [("config", config), ("tokens", tokens.double()), ("targets", targets.double()),
               ("loss", loss.reshape(1)), ("count", torch.tensor([float((targets >= 0).sum())])),
               ("logits", logits)]
    entries += [("param/" + n, t) for n, t in params.items()]
    entries += [("grad/" + n, t.grad) for n, t in params.items()]
    return entries


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out-dir", default=os.path.join(root, "tests", "fixtures"),
                        help="where the gpt_*.bin fixtures go (default: tests/fixtures)")
    parser.add_argument("--seed", type=int, default=1234, help="weights/tokens seed")
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.out_dir, exist_ok=True)
    for rope in (False, True):
        for tied in (True, False):
            name = f"gpt_{'rope' if rope else 'learned'}_{'tied' if tied else 'untied'}.bin"
            entries = make_variant(rope, tied, args.seed)
            path = os.path.join(args.out_dir, name)
            write_fixture(path, entries)
            loss = entries[3][1].item()
            print(f"{path}: loss {loss:.6f}, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
