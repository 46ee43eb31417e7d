"""Hugging Face's models written out in torch from their definitions, and the export's files read
by hand: the independent side of the export tests (export_gpt2_test.py, export_hf_test.py).

Nothing here reads collage's code or its names. Each forward takes the exported tensors (name ->
torch tensor, under Hugging Face's names), the export's config.json as a dict and the inputs, and
computes what transformers' class computes in eval mode (no dropout), in float64 (the reference)
or bfloat16 (weights and every activation rounded, to size the error a bf16 forward makes):

  gpt2_forward      GPT2LMHeadModel: learned positions, pre-LN blocks, Conv1D (in, out) weights
  gpt_neox_forward  GPTNeoXForCausalLM: rotary positions, fused per-head [q k v] rows, pre-LN
                    blocks, sequential residual (use_parallel_residual false)
  bert_forward      BertForPreTraining: post-LN encoder, MLM logits at every position and the
                    next-sentence logits
  roberta_forward   RobertaForMaskedLM: BERT's encoder with positions past the padding id

The files: read_safetensors (one file, its layout checked), read_export (a directory's
model.safetensors, or the shards its model.safetensors.index.json lists) and read_checkpoint
(collage's own checkpoint, for bit-for-bit value checks). Layout errors are collected by check()
into `failures`, which the tests report at the end.

Needs torch and numpy (Debian: python3-torch, /usr/bin/python3): fails, never skips, without.
"""
import json
import math
import os
import struct
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as error:
    sys.exit("FAIL: tests/export/hf_reference.py needs torch and numpy (%s): install Debian's "
             "python3-torch (scripts/install-deps.sh) and run it with /usr/bin/python3" % error)

failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL: " + message)
    return condition


# ---- the files, read by hand -----------------------------------------------------------

def read_checkpoint(path):
    """A collage checkpoint (src/checkpoint/checkpoint.h): name -> (dtype, shape, raw bytes)."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:12] == b"COLLAGE-CKPT", path
    _, meta_bytes, _ = struct.unpack_from("<IQQ", data, 12)
    header = json.loads(data[32:32 + meta_bytes])
    start = (32 + meta_bytes + 63) // 64 * 64
    return {t["name"]: (t["dtype"], t["shape"], data[start + t["offset"]:
                                                     start + t["offset"] + t["bytes"]])
            for t in header["tensors"]}


ELEMENT_BYTES = {"BF16": 2, "F32": 4}


def read_safetensors(path):
    """One .safetensors file by hand: (metadata, name -> torch tensor, name -> raw bytes,
    name -> header entry). Checks the layout safetensors prescribes."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack_from("<Q", data, 0)
    check((8 + n) % 8 == 0, "%s: header of %d bytes: the data does not start 8-aligned" % (path, n))
    text = data[8:8 + n].decode("utf-8")
    check(text.startswith("{") and text.rstrip(" ").endswith("}"),
          "%s: header is not a JSON object padded with spaces" % path)
    header = json.loads(text)
    metadata = header.pop("__metadata__", {})
    check(all(isinstance(v, str) for v in metadata.values()), "%s: metadata not strings" % path)
    position, data_start = 0, 8 + n
    for name, entry in sorted(header.items(), key=lambda item: item[1]["data_offsets"][0]):
        begin, end = entry["data_offsets"]
        check(begin == position, "%s: %s starts at %d, expected %d" % (path, name, begin, position))
        size = ELEMENT_BYTES[entry["dtype"]]
        check(end - begin == size * math.prod(entry["shape"]),
              "%s: %s: offsets do not match shape %s" % (path, name, entry["shape"]))
        check(begin % size == 0, "%s: %s is not aligned to its element size" % (path, name))
        position = end
    check(data_start + position == len(data), "%s: tensors do not cover the data exactly" % path)
    tensors, raw = {}, {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        raw[name] = data[data_start + begin:data_start + end]
        if entry["dtype"] == "BF16":
            t = bf16_of(raw[name], entry["shape"])
        else:
            t = torch.from_numpy(np.frombuffer(raw[name], dtype=np.float32).copy())
        tensors[name] = t.reshape(entry["shape"])
    return metadata, tensors, raw, header


SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"


def read_export(directory):
    """The weights of an export directory as transformers' from_pretrained finds them: the one
    model.safetensors, or the shards model.safetensors.index.json maps each tensor to. Returns
    (metadata, tensors, raw, header, shard file names); for shards the metadata is the first
    shard's. Checks that the index maps every tensor of every shard, to the shard holding it, and
    no other, and that its total_size is the tensors' bytes."""
    index_path = os.path.join(directory, INDEX_FILE)
    if not os.path.exists(index_path):
        metadata, tensors, raw, header = read_safetensors(os.path.join(directory, SINGLE_FILE))
        return metadata, tensors, raw, header, [SINGLE_FILE]
    check(not os.path.exists(os.path.join(directory, SINGLE_FILE)),
          "%s: both %s and %s" % (directory, SINGLE_FILE, INDEX_FILE))
    with open(index_path) as f:
        index = json.load(f)
    weight_map = index.get("weight_map", {})
    check(isinstance(index.get("metadata", {}).get("total_size"), int),
          "%s: no integer metadata.total_size" % index_path)
    shards = sorted(set(weight_map.values()))
    check(len(shards) >= 1, "%s: maps no tensor" % index_path)
    metadata, tensors, raw, header = None, {}, {}, {}
    for shard in shards:
        m, t, r, h = read_safetensors(os.path.join(directory, shard))
        mapped = {name for name, file in weight_map.items() if file == shard}
        check(set(t) == mapped, "%s: %s holds %s, the index maps %s to it" % (
            directory, shard, sorted(set(t) - mapped), sorted(mapped - set(t))))
        check(not set(t) & set(tensors), "%s: %s repeats %s" % (directory, shard,
                                                               sorted(set(t) & set(tensors))))
        metadata = m if metadata is None else metadata
        tensors.update(t), raw.update(r), header.update(h)
    total = sum(len(r) for r in raw.values())
    check(index.get("metadata", {}).get("total_size") == total,
          "%s: total_size %r, the tensors hold %d bytes" % (
              index_path, index.get("metadata", {}).get("total_size"), total))
    return metadata or {}, tensors, raw, header, shards


def bf16_of(raw, shape):
    """Raw bf16 bytes as a torch.bfloat16 tensor of `shape`."""
    return torch.from_numpy(np.frombuffer(raw, dtype=np.int16).copy()).view(
        torch.bfloat16).reshape(shape)


# ---- pieces the models share -----------------------------------------------------------

def gelu_new(x):
    """transformers' "gelu_new" (NewGELUActivation): the tanh approximation."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def gelu_erf(x):
    """transformers' "gelu" (GELUActivation): the exact erf form."""
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


ACTIVATIONS = {"gelu_new": gelu_new, "gelu": gelu_erf}


def activation(cfg, key):
    name = cfg[key]
    if name not in ACTIVATIONS:
        raise ValueError("config.json %s %r: the reference knows %s" % (key, name,
                                                                        sorted(ACTIVATIONS)))
    return ACTIVATIONS[name]


def linear(x, w, name):
    """nn.Linear: x · Wᵀ + b, W (out, in); the bias only when the file has one."""
    y = x @ w[name + ".weight"].T
    return y + w[name + ".bias"] if name + ".bias" in w else y


def layer_norm(x, w, name, eps):
    return F.layer_norm(x, (x.shape[-1],), w[name + ".weight"], w[name + ".bias"], eps)


def attention(q, k, v, allowed):
    """Scaled dot-product attention of (B, NH, T, HS) heads; allowed (B, 1|NH, T, T) bool: which
    keys each query sees. transformers adds the dtype's lowest value at the others, which
    underflows to exactly zero weight after the softmax's max subtraction: as -inf does."""
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    probs = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1)
    return probs @ v


def merge_heads(y):
    B, NH, T, HS = y.shape
    return y.transpose(1, 2).reshape(B, T, NH * HS)


def key_padding(attention_mask, T):
    """(B, 1, T, T): query i may see key j where attention_mask[b, j] is 1 (all when None)."""
    if attention_mask is None:
        return torch.ones(1, 1, T, T, dtype=torch.bool)
    return attention_mask.bool()[:, None, None, :].expand(-1, 1, T, T)


# ---- GPT-2 -----------------------------------------------------------------------------

def gpt2_forward(w, cfg, ids, dtype):
    """GPT2LMHeadModel's forward (eval mode) from the exported tensors and config.json."""
    w = {k: v.to(dtype) for k, v in w.items()}
    B, T = ids.shape
    C, NH = cfg["n_embd"], cfg["n_head"]
    HS, eps = C // NH, cfg["layer_norm_epsilon"]
    x = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][torch.arange(T)]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for layer in range(cfg["n_layer"]):
        p = "transformer.h.%d." % layer
        h = F.layer_norm(x, (C,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        qkv = h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]  # Conv1D: x·W + b
        q, k, v = (t.view(B, T, NH, HS).transpose(1, 2) for t in qkv.split(C, dim=2))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(HS)
        probs = scores.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        y = (probs @ v).transpose(1, 2).reshape(B, T, C)
        x = x + (y @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"])
        h = F.layer_norm(x, (C,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        h = gelu_new(h @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        x = x + (h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"])
    x = F.layer_norm(x, (C,), w["transformer.ln_f.weight"], w["transformer.ln_f.bias"], eps)
    head = w["lm_head.weight"] if not cfg["tie_word_embeddings"] else w["transformer.wte.weight"]
    return x @ head.T


def gpt2_names(layers, tied):
    names = ["transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight",
             "transformer.ln_f.bias"]
    for layer in range(layers):
        p = "transformer.h.%d." % layer
        names += [p + s for s in ("ln_1.weight", "ln_1.bias", "attn.c_attn.weight",
                                  "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
                                  "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
                                  "mlp.c_proj.weight", "mlp.c_proj.bias")]
    return set(names) | (set() if tied else {"lm_head.weight"})


# ---- GPT-NeoX --------------------------------------------------------------------------

def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def neox_rotary(x, base, rotary_ndims, dtype):
    """GPTNeoXRotaryEmbedding + apply_rotary_pos_emb on (B, NH, T, HS) heads at positions
    0..T-1: the first rotary_ndims dimensions of each head rotated, dimension i paired with
    i + rotary_ndims/2 at frequency base^(-2i/rotary_ndims), the rest passed through.
    transformers computes the angles in float32 and casts cos and sin to the activations' dtype:
    so does the bf16 forward here; the float64 one computes them exactly."""
    T = x.shape[-2]
    angle_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    exponents = torch.arange(0, rotary_ndims, 2, dtype=torch.int64).to(angle_dtype) / rotary_ndims
    inv_freq = 1.0 / (base ** exponents)
    freqs = torch.arange(T, dtype=angle_dtype)[:, None] * inv_freq[None, :]  # (T, rotary/2)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(dtype), emb.sin().to(dtype)
    rot, rest = x[..., :rotary_ndims], x[..., rotary_ndims:]
    return torch.cat((rot * cos + rotate_half(rot) * sin, rest), dim=-1)


def gpt_neox_forward(w, cfg, ids, dtype, attention_mask=None):
    """GPTNeoXForCausalLM's forward (eval mode; use_parallel_residual false) from the exported
    tensors and config.json: logits (B, T, V). attention_mask (B, T), optional: keys where it is
    0 are hidden from every query, on top of the causal mask."""
    check(cfg.get("use_parallel_residual") is False,
          "gpt_neox_forward implements use_parallel_residual false, config.json says %r" %
          cfg.get("use_parallel_residual"))
    w = {k: v.to(dtype) for k, v in w.items()}
    B, T = ids.shape
    C, NH, eps = cfg["hidden_size"], cfg["num_attention_heads"], cfg["layer_norm_eps"]
    HS = C // NH
    rotary_ndims = int(HS * cfg["rotary_pct"])
    act = activation(cfg, "hidden_act")
    allowed = torch.tril(torch.ones(T, T, dtype=torch.bool))[None, None] & key_padding(
        attention_mask, T)
    x = w["gpt_neox.embed_in.weight"][ids]
    for layer in range(cfg["num_hidden_layers"]):
        p = "gpt_neox.layers.%d." % layer
        h = layer_norm(x, w, p + "input_layernorm", eps)
        # The fused projection's output viewed as (B, T, NH, 3·HS): head h's rows are
        # [q_h | k_h | v_h], not [all q | all k | all v].
        qkv = linear(h, w, p + "attention.query_key_value").view(B, T, NH, 3 * HS)
        q, k, v = (t.permute(0, 2, 1, 3) for t in qkv.split(HS, dim=-1))
        q = neox_rotary(q, cfg["rotary_emb_base"], rotary_ndims, dtype)
        k = neox_rotary(k, cfg["rotary_emb_base"], rotary_ndims, dtype)
        x = x + linear(merge_heads(attention(q, k, v, allowed)), w, p + "attention.dense")
        h = layer_norm(x, w, p + "post_attention_layernorm", eps)
        h = linear(act(linear(h, w, p + "mlp.dense_h_to_4h")), w, p + "mlp.dense_4h_to_h")
        x = x + h
    x = layer_norm(x, w, "gpt_neox.final_layer_norm", eps)
    head = (w["gpt_neox.embed_in.weight"] if cfg["tie_word_embeddings"]
            else w["embed_out.weight"])
    return x @ head.T


def gpt_neox_shapes(cfg):
    """GPTNeoXForCausalLM's state dict as save_pretrained writes it, name -> shape (tied: no
    embed_out; attention_bias false: no attention biases)."""
    C, V, F_ = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
    shapes = {"gpt_neox.embed_in.weight": [V, C], "gpt_neox.final_layer_norm.weight": [C],
              "gpt_neox.final_layer_norm.bias": [C]}
    for layer in range(cfg["num_hidden_layers"]):
        p = "gpt_neox.layers.%d." % layer
        shapes.update({p + "input_layernorm.weight": [C], p + "input_layernorm.bias": [C],
                       p + "post_attention_layernorm.weight": [C],
                       p + "post_attention_layernorm.bias": [C],
                       p + "attention.query_key_value.weight": [3 * C, C],
                       p + "attention.dense.weight": [C, C],
                       p + "mlp.dense_h_to_4h.weight": [F_, C], p + "mlp.dense_h_to_4h.bias": [F_],
                       p + "mlp.dense_4h_to_h.weight": [C, F_], p + "mlp.dense_4h_to_h.bias": [C]})
        if cfg.get("attention_bias", True):
            shapes.update({p + "attention.query_key_value.bias": [3 * C],
                           p + "attention.dense.bias": [C]})
    if not cfg["tie_word_embeddings"]:
        shapes["embed_out.weight"] = [V, C]
    return shapes


# ---- BERT and RoBERTa ------------------------------------------------------------------

def bert_encoder(w, prefix, cfg, ids, token_type_ids, position_ids, attention_mask):
    """BertModel's embeddings and encoder (RobertaModel's too, given its positions): (B, T, C)."""
    B, T = ids.shape
    C, NH, eps = cfg["hidden_size"], cfg["num_attention_heads"], cfg["layer_norm_eps"]
    HS = C // NH
    act = activation(cfg, "hidden_act")
    check(cfg.get("position_embedding_type", "absolute") == "absolute",
          "the reference implements absolute positions, config.json says %r" %
          cfg.get("position_embedding_type"))
    e = prefix + "embeddings."
    # transformers' order: word + token type, then + position.
    x = w[e + "word_embeddings.weight"][ids] + w[e + "token_type_embeddings.weight"][token_type_ids]
    x = x + w[e + "position_embeddings.weight"][position_ids]
    x = layer_norm(x, w, e + "LayerNorm", eps)
    allowed = key_padding(attention_mask, T)
    for layer in range(cfg["num_hidden_layers"]):
        p = prefix + "encoder.layer.%d." % layer

        def heads(name):
            return linear(x, w, p + "attention.self." + name).view(B, T, NH, HS).transpose(1, 2)

        y = merge_heads(attention(heads("query"), heads("key"), heads("value"), allowed))
        x = layer_norm(linear(y, w, p + "attention.output.dense") + x, w,
                       p + "attention.output.LayerNorm", eps)
        h = act(linear(x, w, p + "intermediate.dense"))
        x = layer_norm(linear(h, w, p + "output.dense") + x, w, p + "output.LayerNorm", eps)
    return x


def bert_forward(w, cfg, ids, token_type_ids, attention_mask, dtype):
    """BertForPreTraining's forward (eval mode): (prediction logits (B, T, V) at every position,
    seq_relationship logits (B, 2)). Positions 0..T-1; the decoder is word_embeddings (tied)."""
    w = {k: v.to(dtype) for k, v in w.items()}
    T = ids.shape[1]
    x = bert_encoder(w, "bert.", cfg, ids, token_type_ids, torch.arange(T)[None, :],
                     attention_mask)
    act, eps = activation(cfg, "hidden_act"), cfg["layer_norm_eps"]
    h = act(linear(x, w, "cls.predictions.transform.dense"))
    h = layer_norm(h, w, "cls.predictions.transform.LayerNorm", eps)
    mlm = h @ w["bert.embeddings.word_embeddings.weight"].T + w["cls.predictions.bias"]
    pooled = torch.tanh(linear(x[:, 0], w, "bert.pooler.dense"))
    return mlm, linear(pooled, w, "cls.seq_relationship")


def roberta_position_ids(ids, pad_token_id):
    """create_position_ids_from_input_ids: real tokens count up from pad_token_id + 1, padding
    tokens (by id, not by attention_mask) sit at pad_token_id."""
    real = (ids != pad_token_id).long()
    return torch.cumsum(real, dim=1) * real + pad_token_id


def roberta_forward(w, cfg, ids, attention_mask, dtype, token_type_ids=None):
    """RobertaForMaskedLM's forward (eval mode): logits (B, T, V) at every position. The decoder
    is word_embeddings (tied); lm_head's activation is erf GELU whatever hidden_act says."""
    w = {k: v.to(dtype) for k, v in w.items()}
    if token_type_ids is None:
        token_type_ids = torch.zeros_like(ids)
    x = bert_encoder(w, "roberta.", cfg, ids, token_type_ids,
                     roberta_position_ids(ids, cfg["pad_token_id"]), attention_mask)
    h = gelu_erf(linear(x, w, "lm_head.dense"))
    h = layer_norm(h, w, "lm_head.layer_norm", cfg["layer_norm_eps"])
    return h @ w["roberta.embeddings.word_embeddings.weight"].T + w["lm_head.bias"]


def encoder_shapes(prefix, cfg):
    """BertModel's embeddings and encoder (RobertaModel's too) under `prefix`, name -> shape."""
    C, F_ = cfg["hidden_size"], cfg["intermediate_size"]
    e = prefix + "embeddings."
    shapes = {e + "word_embeddings.weight": [cfg["vocab_size"], C],
              e + "position_embeddings.weight": [cfg["max_position_embeddings"], C],
              e + "token_type_embeddings.weight": [cfg["type_vocab_size"], C],
              e + "LayerNorm.weight": [C], e + "LayerNorm.bias": [C]}
    for layer in range(cfg["num_hidden_layers"]):
        p = prefix + "encoder.layer.%d." % layer
        for module, out, inp in (("attention.self.query", C, C), ("attention.self.key", C, C),
                                 ("attention.self.value", C, C),
                                 ("attention.output.dense", C, C), ("intermediate.dense", F_, C),
                                 ("output.dense", C, F_)):
            shapes.update({p + module + ".weight": [out, inp], p + module + ".bias": [out]})
        for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
            shapes.update({p + norm + ".weight": [C], p + norm + ".bias": [C]})
    return shapes


def bert_shapes(cfg):
    """BertForPreTraining's state dict as save_pretrained writes it, name -> shape: the tied
    decoder (its weight and the alias of its bias) left out."""
    C = cfg["hidden_size"]
    shapes = encoder_shapes("bert.", cfg)
    shapes.update({"bert.pooler.dense.weight": [C, C], "bert.pooler.dense.bias": [C],
                   "cls.predictions.transform.dense.weight": [C, C],
                   "cls.predictions.transform.dense.bias": [C],
                   "cls.predictions.transform.LayerNorm.weight": [C],
                   "cls.predictions.transform.LayerNorm.bias": [C],
                   "cls.predictions.bias": [cfg["vocab_size"]],
                   "cls.seq_relationship.weight": [2, C], "cls.seq_relationship.bias": [2]})
    return shapes


def roberta_shapes(cfg):
    """RobertaForMaskedLM's state dict as save_pretrained writes it, name -> shape (no pooler;
    the tied decoder left out)."""
    C = cfg["hidden_size"]
    shapes = encoder_shapes("roberta.", cfg)
    shapes.update({"lm_head.dense.weight": [C, C], "lm_head.dense.bias": [C],
                   "lm_head.layer_norm.weight": [C], "lm_head.layer_norm.bias": [C],
                   "lm_head.bias": [cfg["vocab_size"]]})
    return shapes
