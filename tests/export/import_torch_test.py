#!/usr/bin/env python3
"""`collage import` of Hugging Face files that torch wrote, not collage (src/checkpoint/hf_weights.h).

Three directories are written here from torch tensors, in safetensors' published format (an
8-byte header length, the JSON header, the raw little-endian tensors) with the config.json
transformers writes for the class:

1. GPT2LMHeadModel as the published GPT-2 is saved: F32, names without "transformer.", the
   causal-mask buffers h.N.attn.bias beside the weights, tied (no lm_head.weight).
2. GPTNeoXForCausalLM: F16, untied, split into two shards with model.safetensors.index.json.
3. BertForPreTraining: BF16, with the tied decoder's copy (cls.predictions.decoder.weight and
   .bias) and the position_ids buffer saved anyway.

Each is imported (`collage import DIR --output CKPT`) and the checkpoint read back by hand: every
collage parameter must be the right HF tensor rearranged as collage keeps it (Conv1D weights
transposed, GPT-NeoX's per-head q/k/v rows regrouped as [q | k | v], BERT's query/key/value
concatenated, the vocabulary padded with zero rows), its values torch's own rounding to
bfloat16 (round to nearest even) of the float32 (or exactly widened float16) values, bit for
bit. The log must count the rounded values and name what it skipped.

Usage: import_torch_test.py --collage BIN
Needs torch and numpy (Debian: python3-torch, /usr/bin/python3): fails, never skips, without.
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError as error:
    sys.exit("FAIL: import_torch_test.py needs torch and numpy (%s): install Debian's "
             "python3-torch (scripts/install-deps.sh) and run it with /usr/bin/python3" % error)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_reference as hf  # noqa: E402
from hf_reference import bf16_of, check, read_checkpoint  # noqa: E402

C, NH, L, V, POSITIONS, F = 64, 4, 2, 200, 32, 256
HS = C // NH
PADDED = 256  # V rounded up to a multiple of 128, as collage pads the vocabulary


# ---- safetensors, written as the format's documentation describes ----------------------

DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.int64: "I64",
          torch.bool: "BOOL"}


def raw_bytes(t):
    t = t.contiguous()
    if t.dtype in (torch.float16, torch.bfloat16):
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()


def write_safetensors(path, tensors, metadata=None):
    header, data, offset = {}, [], 0
    for name, t in tensors.items():
        b = raw_bytes(t)
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(b)]}
        data.append(b)
        offset += len(b)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(data))


def write_sharded(directory, tensors, shards):
    """`shards` files of consecutive tensors, and the index transformers writes."""
    names = list(tensors)
    per = (len(names) + shards - 1) // shards
    weight_map, total = {}, 0
    for k in range(shards):
        file = "model-%05d-of-%05d.safetensors" % (k + 1, shards)
        part = {n: tensors[n] for n in names[k * per:(k + 1) * per]}
        write_safetensors(os.path.join(directory, file), part, {"format": "pt"})
        for n, t in part.items():
            weight_map[n] = file
            total += t.numel() * t.element_size()
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2,
                  sort_keys=True)


def write_config(directory, config):
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


# ---- what collage must hold ------------------------------------------------------------

def to_bf16(t):
    """torch's float32 -> bfloat16 (round to nearest even); float16 is widened exactly first."""
    return t.float().to(torch.bfloat16)


def vocab_rows(t):
    """The vocabulary padded with zero rows to collage's PADDED."""
    out = torch.zeros((PADDED,) + tuple(t.shape[1:]), dtype=torch.bfloat16)
    out[:t.shape[0]] = to_bf16(t)
    return out


def randn(*shape, gen, dtype=torch.float32):
    return (torch.randn(*shape, generator=gen) * 0.5).to(dtype)


def gpt2_case(work, gen):
    d = os.path.join(work, "gpt2")
    os.makedirs(d)
    hf = {"wte.weight": randn(V, C, gen=gen), "wpe.weight": randn(POSITIONS, C, gen=gen)}
    for l in range(L):
        p = "h.%d." % l
        hf[p + "attn.bias"] = torch.tril(torch.ones(POSITIONS, POSITIONS, dtype=torch.bool)).view(
            1, 1, POSITIONS, POSITIONS)
        for name, shape in (("ln_1.weight", (C,)), ("ln_1.bias", (C,)),
                            ("attn.c_attn.weight", (C, 3 * C)), ("attn.c_attn.bias", (3 * C,)),
                            ("attn.c_proj.weight", (C, C)), ("attn.c_proj.bias", (C,)),
                            ("ln_2.weight", (C,)), ("ln_2.bias", (C,)),
                            ("mlp.c_fc.weight", (C, F)), ("mlp.c_fc.bias", (F,)),
                            ("mlp.c_proj.weight", (F, C)), ("mlp.c_proj.bias", (C,))):
            hf[p + name] = randn(*shape, gen=gen)
    hf["ln_f.weight"], hf["ln_f.bias"] = randn(C, gen=gen), randn(C, gen=gen)
    write_safetensors(os.path.join(d, "model.safetensors"), hf, {"format": "pt"})
    write_config(d, {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
                     "activation_function": "gelu_new", "n_ctx": POSITIONS, "n_embd": C,
                     "n_head": NH, "n_layer": L, "n_positions": POSITIONS, "vocab_size": V,
                     "layer_norm_epsilon": 1e-05, "initializer_range": 0.02,
                     "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1,
                     "bos_token_id": V - 1, "eos_token_id": V - 1})
    want = {"wte.weight": vocab_rows(hf["wte.weight"]), "wpe.weight": to_bf16(hf["wpe.weight"]),
            "ln_f.weight": to_bf16(hf["ln_f.weight"]), "ln_f.bias": to_bf16(hf["ln_f.bias"])}
    conv1d = {"attn.qkv": "attn.c_attn", "attn.proj": "attn.c_proj", "mlp.fc1": "mlp.c_fc",
              "mlp.fc2": "mlp.c_proj"}
    for l in range(L):
        p = "h.%d." % l
        for ln in ("ln_1", "ln_2"):
            for wb in ("weight", "bias"):
                want[p + ln + "." + wb] = to_bf16(hf[p + ln + "." + wb])
        for ours, theirs in conv1d.items():
            want[p + ours + ".weight"] = to_bf16(hf[p + theirs + ".weight"].T)  # (in, out)->(out, in)
            want[p + ours + ".bias"] = to_bf16(hf[p + theirs + ".bias"])
    floats = sum(t.numel() for n, t in hf.items() if not n.endswith("attn.bias"))
    return d, want, floats, ["h.0.attn.bias", "h.1.attn.bias"]  # floats: F32 values read


def neox_case(work, gen):
    d = os.path.join(work, "neox")
    os.makedirs(d)
    f16 = torch.float16
    hf = {"gpt_neox.embed_in.weight": randn(V, C, gen=gen, dtype=f16)}
    for l in range(L):
        p = "gpt_neox.layers.%d." % l
        for name, shape in (("input_layernorm.weight", (C,)), ("input_layernorm.bias", (C,)),
                            ("post_attention_layernorm.weight", (C,)),
                            ("post_attention_layernorm.bias", (C,)),
                            ("attention.query_key_value.weight", (3 * C, C)),
                            ("attention.query_key_value.bias", (3 * C,)),
                            ("attention.dense.weight", (C, C)), ("attention.dense.bias", (C,)),
                            ("mlp.dense_h_to_4h.weight", (F, C)), ("mlp.dense_h_to_4h.bias", (F,)),
                            ("mlp.dense_4h_to_h.weight", (C, F)), ("mlp.dense_4h_to_h.bias", (C,))):
            hf[p + name] = randn(*shape, gen=gen, dtype=f16)
    hf["gpt_neox.final_layer_norm.weight"] = randn(C, gen=gen, dtype=f16)
    hf["gpt_neox.final_layer_norm.bias"] = randn(C, gen=gen, dtype=f16)
    hf["embed_out.weight"] = randn(V, C, gen=gen, dtype=f16)
    write_sharded(d, hf, 2)
    write_config(d, {"architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox",
                     "hidden_size": C, "num_attention_heads": NH, "num_hidden_layers": L,
                     "intermediate_size": F, "vocab_size": V, "max_position_embeddings": POSITIONS,
                     "hidden_act": "gelu_new", "rotary_pct": 1.0, "rotary_emb_base": 10000,
                     "layer_norm_eps": 1e-05, "use_parallel_residual": False,
                     "tie_word_embeddings": False, "torch_dtype": "float16"})
    want = {"wte.weight": vocab_rows(hf["gpt_neox.embed_in.weight"]),
            "lm_head.weight": vocab_rows(hf["embed_out.weight"]),
            "ln_f.weight": to_bf16(hf["gpt_neox.final_layer_norm.weight"]),
            "ln_f.bias": to_bf16(hf["gpt_neox.final_layer_norm.bias"])}
    for l in range(L):
        p, q = "h.%d." % l, "gpt_neox.layers.%d." % l
        pairs = {"ln_1": "input_layernorm", "ln_2": "post_attention_layernorm",
                 "attn.proj": "attention.dense", "mlp.fc1": "mlp.dense_h_to_4h",
                 "mlp.fc2": "mlp.dense_4h_to_h"}
        for ours, theirs in pairs.items():
            for wb in ("weight", "bias"):
                want[p + ours + "." + wb] = to_bf16(hf[q + theirs + "." + wb])
        # HF's rows are (head, q/k/v, HS); collage's [q | k | v], each (head, HS).
        w = hf[q + "attention.query_key_value.weight"].view(NH, 3, HS, C)
        want[p + "attn.qkv.weight"] = to_bf16(w.permute(1, 0, 2, 3).reshape(3 * C, C))
        b = hf[q + "attention.query_key_value.bias"].view(NH, 3, HS)
        want[p + "attn.qkv.bias"] = to_bf16(b.permute(1, 0, 2).reshape(3 * C))
    return d, want, sum(t.numel() for t in hf.values()), []


def bert_case(work, gen):
    d = os.path.join(work, "bert")
    os.makedirs(d)
    bf = torch.bfloat16
    hf = {"bert.embeddings.word_embeddings.weight": randn(V, C, gen=gen, dtype=bf),
          "bert.embeddings.position_embeddings.weight": randn(POSITIONS, C, gen=gen, dtype=bf),
          "bert.embeddings.token_type_embeddings.weight": randn(2, C, gen=gen, dtype=bf),
          "bert.embeddings.LayerNorm.weight": randn(C, gen=gen, dtype=bf),
          "bert.embeddings.LayerNorm.bias": randn(C, gen=gen, dtype=bf),
          "bert.embeddings.position_ids": torch.arange(POSITIONS).view(1, POSITIONS)}
    linear = {"attention.self.query": (C, C), "attention.self.key": (C, C),
              "attention.self.value": (C, C), "attention.output.dense": (C, C),
              "attention.output.LayerNorm": (C,), "intermediate.dense": (F, C),
              "output.dense": (C, F), "output.LayerNorm": (C,)}
    for l in range(L):
        p = "bert.encoder.layer.%d." % l
        for name, shape in linear.items():
            hf[p + name + ".weight"] = randn(*shape, gen=gen, dtype=bf)
            hf[p + name + ".bias"] = randn(shape[0], gen=gen, dtype=bf)
    for name, shape in (("bert.pooler.dense", (C, C)), ("cls.predictions.transform.dense", (C, C)),
                        ("cls.predictions.transform.LayerNorm", (C,)),
                        ("cls.seq_relationship", (2, C))):
        hf[name + ".weight"] = randn(*shape, gen=gen, dtype=bf)
        hf[name + ".bias"] = randn(shape[0], gen=gen, dtype=bf)
    hf["cls.predictions.bias"] = randn(V, gen=gen, dtype=bf)
    hf["cls.predictions.decoder.weight"] = hf["bert.embeddings.word_embeddings.weight"].clone()
    hf["cls.predictions.decoder.bias"] = hf["cls.predictions.bias"].clone()
    write_safetensors(os.path.join(d, "model.safetensors"), hf, {"format": "pt"})
    write_config(d, {"architectures": ["BertForPreTraining"], "model_type": "bert",
                     "hidden_size": C, "num_attention_heads": NH, "num_hidden_layers": L,
                     "intermediate_size": F, "vocab_size": V, "max_position_embeddings": POSITIONS,
                     "type_vocab_size": 2, "hidden_act": "gelu", "layer_norm_eps": 1e-12,
                     "pad_token_id": 0, "hidden_dropout_prob": 0.1,
                     "attention_probs_dropout_prob": 0.1, "position_embedding_type": "absolute"})
    e = "bert.embeddings."
    want = {"embeddings.word.weight": vocab_rows(hf[e + "word_embeddings.weight"]),
            "embeddings.position.weight": hf[e + "position_embeddings.weight"],
            "embeddings.token_type.weight": hf[e + "token_type_embeddings.weight"],
            "embeddings.ln.weight": hf[e + "LayerNorm.weight"],
            "embeddings.ln.bias": hf[e + "LayerNorm.bias"],
            "mlm.decoder.bias": vocab_rows(hf["cls.predictions.bias"])}
    for ours, theirs in (("pooler.dense", "bert.pooler.dense"),
                         ("mlm.dense", "cls.predictions.transform.dense"),
                         ("mlm.ln", "cls.predictions.transform.LayerNorm"),
                         ("nsp", "cls.seq_relationship")):
        for wb in ("weight", "bias"):
            want[ours + "." + wb] = hf[theirs + "." + wb]
    pairs = {"attn.proj": "attention.output.dense", "ln_1": "attention.output.LayerNorm",
             "mlp.fc1": "intermediate.dense", "mlp.fc2": "output.dense", "ln_2": "output.LayerNorm"}
    for l in range(L):
        p, q = "h.%d." % l, "bert.encoder.layer.%d." % l
        for ours, theirs in pairs.items():
            for wb in ("weight", "bias"):
                want[p + ours + "." + wb] = hf[q + theirs + "." + wb]
        for wb in ("weight", "bias"):
            want[p + "attn.qkv." + wb] = torch.cat(
                [hf[q + "attention.self." + s + "." + wb] for s in ("query", "key", "value")])
    skipped = ["bert.embeddings.position_ids", "cls.predictions.decoder.weight",
               "cls.predictions.decoder.bias"]
    return d, want, 0, skipped


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--collage", required=True)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="collage_import_torch_")
    gen = torch.Generator().manual_seed(11)
    try:
        for make in (gpt2_case, neox_case, bert_case):
            directory, want, floats, skipped = make(work, gen)
            name = os.path.basename(directory)
            ckpt = os.path.join(work, name + ".ckpt")
            result = subprocess.run([args.collage, "import", directory, "--output", ckpt],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    timeout=120)
            print(result.stdout.rstrip())
            if not check(result.returncode == 0, "%s: collage import exited %d" % (
                    name, result.returncode)):
                continue
            got = read_checkpoint(ckpt)
            check(set(got) == set(want), "%s: parameters differ: extra %s, missing %s" % (
                name, sorted(set(got) - set(want)), sorted(set(want) - set(got))))
            changed = 0
            for param, expected in want.items():
                if param not in got:
                    continue
                dtype, shape, data = got[param]
                if not check(dtype == "bf16" and shape == list(expected.shape),
                             "%s: %s is %s %s, expected bf16 %s" % (name, param, dtype, shape,
                                                                   list(expected.shape))):
                    continue
                check(torch.equal(bf16_of(data, shape).view(torch.int16),
                                  expected.contiguous().view(torch.int16)),
                      "%s: %s is not the HF tensor rounded by torch" % (name, param))
            for s in skipped:
                check(s in result.stdout, "%s: the log does not name skipped %s" % (name, s))
            rounded = "values rounded to bf16" in result.stdout
            check(rounded == (floats > 0), "%s: the log %s rounded values" % (
                name, "counts" if rounded else "does not count"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if hf.failures:
        sys.exit("FAIL: %d check(s) failed" % len(hf.failures))
    print("PASS")


if __name__ == "__main__":
    main()
