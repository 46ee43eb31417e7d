#!/usr/bin/python3
"""Reference BERT and RoBERTa in PyTorch (float64) for collage's encoder tests.

An independent implementation of the encoders as Hugging Face's BertForPreTraining and
RobertaForMaskedLM compute them (post-LayerNorm blocks, exact erf GELU, bidirectional attention
with the padding mask, fused [q | k | v] projection in collage's layout), without dropout:
  embeddings  word[ids] + position[pos] + token_type[segments], layernorm
  block       x = LN1(x + proj(attention(x)));  x = LN2(x + fc2(gelu(fc1(x))))
  MLM head    rows at the masked positions: LN(gelu(dense(x))) · wordᵀ + decoder bias
  BERT only   pooler tanh(dense(x[CLS])), NSP classifier (2 classes); loss = MLM + NSP
RoBERTa has one token type, no pooler/NSP, and positions offset past the padding index:
pos = cumsum(mask)·mask + pad_id (pads sit at pad_id), as fairseq/HF create_position_ids.

For each variant it writes tests/fixtures/{bert,roberta}_encoder.bin (format of
gpt_reference.py: magic b"CLGFIX01", uint32 entry count, per entry uint32 name length, name,
uint32 ndim, int64 dims, float32 data) holding the weights (bf16-representable values) under
collage's parameter names, the batch (ids, input mask, segments, masked positions and labels
zero-padded as in the HDF5 files, NSP labels), the MLM and NSP losses, the MLM logits and the
gradient of the total loss for every parameter.

Regenerate (Debian's python3-torch, CPU only; deterministic):
    /usr/bin/python3 scripts/reference/bert_reference.py [--out-dir tests/fixtures]
"""
import argparse
import math
import os
import struct

import torch

# The fixture format and bf16 rounding are the GPT reference's (same folder).
from gpt_reference import padded_vocab, to_bf16_values, write_fixture

CONFIG = dict(n_layer=2, hidden=32, n_head=4, ffn=64, vocab=200, batch=3, seq=16, predictions=4)
VARIANTS = {
    "bert": dict(type_vocab=2, max_pos=16, eps=1e-12, pad_id=0, nsp=True),
    "roberta": dict(type_vocab=1, max_pos=18, eps=1e-5, pad_id=1, nsp=False),
}


def make_parameters(gen, v):
    c = CONFIG
    C, F, Vp = c["hidden"], c["ffn"], padded_vocab(c["vocab"])

    def normal(shape, std, mean=0.0):
        return to_bf16_values(mean + std * torch.randn(shape, generator=gen, dtype=torch.float64))

    p = {
        "embeddings.word.weight": normal((Vp, C), 0.2),
        "embeddings.position.weight": normal((v["max_pos"], C), 0.2),
        "embeddings.token_type.weight": normal((v["type_vocab"], C), 0.2),
        "embeddings.ln.weight": normal((C,), 0.1, 1.0),
        "embeddings.ln.bias": normal((C,), 0.1),
    }
    for l in range(c["n_layer"]):
        h = f"h.{l}."
        p[h + "attn.qkv.weight"] = normal((3 * C, C), 1 / math.sqrt(C))
        p[h + "attn.qkv.bias"] = normal((3 * C,), 0.1)
        p[h + "attn.proj.weight"] = normal((C, C), 1 / math.sqrt(C))
        p[h + "attn.proj.bias"] = normal((C,), 0.1)
        p[h + "ln_1.weight"] = normal((C,), 0.1, 1.0)
        p[h + "ln_1.bias"] = normal((C,), 0.1)
        p[h + "mlp.fc1.weight"] = normal((F, C), 1 / math.sqrt(C))
        p[h + "mlp.fc1.bias"] = normal((F,), 0.1)
        p[h + "mlp.fc2.weight"] = normal((C, F), 1 / math.sqrt(F))
        p[h + "mlp.fc2.bias"] = normal((C,), 0.1)
        p[h + "ln_2.weight"] = normal((C,), 0.1, 1.0)
        p[h + "ln_2.bias"] = normal((C,), 0.1)
    p["mlm.dense.weight"] = normal((C, C), 1 / math.sqrt(C))
    p["mlm.dense.bias"] = normal((C,), 0.1)
    p["mlm.ln.weight"] = normal((C,), 0.1, 1.0)
    p["mlm.ln.bias"] = normal((C,), 0.1)
    p["mlm.decoder.bias"] = normal((Vp,), 0.1)
    if v["nsp"]:
        p["pooler.dense.weight"] = normal((C, C), 1 / math.sqrt(C))
        p["pooler.dense.bias"] = normal((C,), 0.1)
        p["nsp.weight"] = normal((2, C), 1 / math.sqrt(C))
        p["nsp.bias"] = normal((2,), 0.1)
    return p


def layer_norm(x, weight, bias, eps):
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


def gelu_erf(x):
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def attention(qkv, key_mask):
    B, T, _ = qkv.shape
    C, NH = CONFIG["hidden"], CONFIG["n_head"]
    HS = C // NH
    q, k, v = (t.reshape(B, T, NH, HS).transpose(1, 2) for t in qkv.split(C, dim=-1))
    scores = q @ k.transpose(-2, -1) / math.sqrt(HS)  # (B, NH, T, T)
    scores = scores.masked_fill(key_mask[:, None, None, :] == 0, float("-inf"))
    y = torch.softmax(scores, dim=-1) @ v
    return y.transpose(1, 2).reshape(B, T, C)


def forward(p, batch, v):
    c = CONFIG
    V, eps = c["vocab"], v["eps"]
    ids, mask, segments = batch["input_ids"], batch["input_mask"], batch["segment_ids"]
    if v["nsp"]:
        positions = torch.arange(ids.shape[1]).expand_as(ids)
    else:
        positions = torch.cumsum(mask, dim=1) * mask + v["pad_id"]
    x = (p["embeddings.word.weight"][ids] + p["embeddings.position.weight"][positions] +
         p["embeddings.token_type.weight"][segments])
    x = layer_norm(x, p["embeddings.ln.weight"], p["embeddings.ln.bias"], eps)
    for l in range(c["n_layer"]):
        h = lambda name: p[f"h.{l}.{name}"]  # noqa: E731
        qkv = x @ h("attn.qkv.weight").T + h("attn.qkv.bias")
        a = attention(qkv, mask) @ h("attn.proj.weight").T + h("attn.proj.bias")
        x = layer_norm(x + a, h("ln_1.weight"), h("ln_1.bias"), eps)
        m = gelu_erf(x @ h("mlp.fc1.weight").T + h("mlp.fc1.bias"))
        m = m @ h("mlp.fc2.weight").T + h("mlp.fc2.bias")
        x = layer_norm(x + m, h("ln_2.weight"), h("ln_2.bias"), eps)
    # MLM on the labelled positions: each row's labels end at its first zero position.
    rows, labels = [], []
    for b in range(ids.shape[0]):
        for k in range(c["predictions"]):
            position = int(batch["masked_lm_positions"][b, k])
            if position == 0:
                break
            rows.append(b * ids.shape[1] + position)
            labels.append(int(batch["masked_lm_ids"][b, k]))
    picked = x.reshape(-1, c["hidden"])[torch.tensor(rows)]
    t = gelu_erf(picked @ p["mlm.dense.weight"].T + p["mlm.dense.bias"])
    t = layer_norm(t, p["mlm.ln.weight"], p["mlm.ln.bias"], eps)
    logits = t @ p["embeddings.word.weight"].T + p["mlm.decoder.bias"]  # (rows, Vp)
    log_probs = torch.log_softmax(logits[:, :V], dim=-1)
    mlm = -log_probs[torch.arange(len(rows)), torch.tensor(labels)].mean()
    out = {"mlm_loss": mlm, "mlm_logits": logits}
    total = mlm
    if v["nsp"]:
        pooled = torch.tanh(x[:, 0] @ p["pooler.dense.weight"].T + p["pooler.dense.bias"])
        nsp_logits = pooled @ p["nsp.weight"].T + p["nsp.bias"]
        nsp = -torch.log_softmax(nsp_logits, dim=-1)[
            torch.arange(ids.shape[0]), batch["next_sentence_labels"]].mean()
        out["nsp_loss"], out["nsp_logits"] = nsp, nsp_logits
        total = total + nsp
    out["loss"] = total
    return out


def make_batch(gen, v):
    c = CONFIG
    B, S, P = c["batch"], c["seq"], c["predictions"]
    lengths = [S, S - 5, S - 9]  # one full row, two padded
    ids = torch.full((B, S), v["pad_id"], dtype=torch.long)
    mask = torch.zeros((B, S), dtype=torch.long)
    segments = torch.zeros((B, S), dtype=torch.long)
    positions = torch.zeros((B, P), dtype=torch.long)
    labels = torch.zeros((B, P), dtype=torch.long)
    for b, n in enumerate(lengths):
        ids[b, :n] = torch.randint(2, c["vocab"], (n,), generator=gen)
        mask[b, :n] = 1
        if v["type_vocab"] > 1:
            segments[b, n // 2:n] = 1
        count = P if b != 1 else P - 2  # a row whose labels end early (zero padded)
        chosen = torch.randperm(n - 1, generator=gen)[:count] + 1  # never [CLS] at 0
        positions[b, :count] = chosen.sort().values
        labels[b, :count] = torch.randint(2, c["vocab"], (count,), generator=gen)
    nsp = torch.tensor([0, 1, 1])
    return dict(input_ids=ids, input_mask=mask, segment_ids=segments, masked_lm_positions=positions,
                masked_lm_ids=labels, next_sentence_labels=nsp)


def make_variant(name, seed, out_dir):
    v = VARIANTS[name]
    gen = torch.Generator().manual_seed(seed)
    params = make_parameters(gen, v)
    batch = make_batch(gen, v)
    for t in params.values():
        t.requires_grad_(True)
    out = forward(params, batch, v)
    out["loss"].backward()
    entries = [("param." + k, t) for k, t in params.items()]
    entries += [("grad." + k, t.grad) for k, t in params.items()]
    entries += [("batch." + k, t.to(torch.float64)) for k, t in batch.items()]
    entries += [("out." + k, t.reshape(-1) if t.dim() == 0 else t) for k, t in out.items()]
    config = [CONFIG["n_layer"], CONFIG["hidden"], CONFIG["n_head"], CONFIG["ffn"], CONFIG["vocab"],
              v["max_pos"], v["type_vocab"], v["pad_id"], v["eps"], CONFIG["predictions"]]
    entries.append(("config", torch.tensor(config, dtype=torch.float64)))
    path = os.path.join(out_dir, f"{name}_encoder.bin")
    write_fixture(path, entries)
    print(f"{path}: loss {out['loss'].item():.6f} ({os.path.getsize(path)} bytes)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out-dir", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                          "tests", "fixtures"))
    args = parser.parse_args()
    torch.manual_seed(0)
    make_variant("bert", 1234, args.out_dir)
    make_variant("roberta", 4321, args.out_dir)


if __name__ == "__main__":
    main()
