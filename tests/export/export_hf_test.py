#!/usr/bin/env python3
"""`collage export` under Hugging Face's names for the architectures beyond GPT-2, against the
transformers classes' forwards written out in torch (hf_reference.py), never against collage's
own export code.

Four tiny models are trained 20 steps (collage-plus, so the weights are trained bf16 values, the
biases and layernorms away from their init) and exported:

1. rope-tied: a GPT with rotary positions and tied embeddings, one process, exported from the
   checkpoint directory -> GPTNeoXForCausalLM.
2. rope-untied-tp2: rotary, untied, ffn_hidden_size 96, trained under mpirun at tensor-parallel
   2, exported from the set's manifest -> GPTNeoXForCausalLM with embed_out. Then read back:
   import -> export gives the same files, and a TP=2 run from hf:DIR saves the same weights.
3. bert: BERT on BERT pretraining HDF5 shards that `collage prepare-bert` makes from
   tests/parallel/equivalence.py's corpus, with its WordPiece vocab.txt -> BertForPreTraining;
   also exported with --max-shard-size 100KB, whose shards (read through
   model.safetensors.index.json) must hold the single file's tensors bit for bit.
4. roberta: RoBERTa on shards of the same kind -> RobertaForMaskedLM; also exported with
   --dtype float32, which must widen the bf16 export exactly.

For each export: config.json names the class and holds the fields transformers reads (checked
field by field); the tensors (model.safetensors, or the shards of model.safetensors.index.json)
are exactly the class's state dict as save_pretrained writes it (the tied decoder left out), with
its shapes, all BF16; and the class's forward, computed in float64 from the export alone, is
compared with collage's own logits for the same inputs (export_dump_logits on the checkpoint):
the fp32 model (GptT<float> / BertT<float>, the same bf16 weights widened) must agree to
FP32_TOLERANCE, the bf16 model as it trains within export_gpt2_test.py's bf16 rule (BF16_*).
The inputs have padding: rows that end early, pad ids there, attention_mask 0 for the encoders;
BERT's have segment B tokens (token_type_ids 1). The GPTs are compared without an
attention_mask (collage's GPT has none; a causal model's real positions do not see the padding
after them, which the masked reference confirms). The encoders are compared at every position,
padding included (collage's MLM head predicts there too: BertT's inference mode, bert.h).

--keep DIR writes each export to DIR/CASE/export and, beside it, DIR/CASE/expected.npz for a
machine with transformers: input_ids, token_type_ids and attention_mask (encoders), logits
(B, T, V) of collage's fp32 forward, nsp_logits (B, 2) for BERT, and text with text_ids (what
`collage tokenize` gives) when the export holds a tokenizer.

Usage: export_hf_test.py --collage BIN --dump-logits BIN [--mpirun MPIRUN] [--keep DIR]
Needs torch and numpy (Debian: python3-torch, /usr/bin/python3): fails, never skips, without.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError as error:
    sys.exit("FAIL: export_hf_test.py needs torch and numpy (%s): install Debian's "
             "python3-torch (scripts/install-deps.sh) and run it with /usr/bin/python3" % error)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "parallel"))
sys.path.insert(0, HERE)
import equivalence  # noqa: E402
import hf_reference as hf  # noqa: E402
# The GPT cases and the bf16 rule are the GPT-2 test's.
from export_gpt2_test import BF16_FACTOR, BF16_SCALE_LIMIT, Case, run  # noqa: E402

# collage's fp32 models against float64: the same bf16 weights, fp32 arithmetic summed in
# another order, so differences of a few fp32 ulps of the logits (max |logit| 2.5-4 here).
# Measured: 9.1e-7 and 9.6e-7 for the rope GPTs, 1.2e-6 (NSP 1e-8) for BERT, 1.4e-6 for RoBERTa
# (relative to the largest logit: 2.4e-7 to 5.3e-7, within check.py's default 1e-4 with room).
# The GPT-2 test's 1e-4 keeps ~70x that margin for other machines' summation orders, while any
# layout error (a transposed matrix, heads split the wrong way, q/k/v rows interleaved wrongly,
# a missing bias, positions off by one) moves the logits by O(0.01) and more.
FP32_TOLERANCE = 1e-4
STEP = 20


# ---- the models ------------------------------------------------------------------------

class EncoderCase:
    """A tiny BERT or RoBERTa trained STEP steps on shards prepare-bert makes from
    tests/parallel/equivalence.py's corpus (its write_encoder_data: vocab, corpus, shards,
    config)."""

    def __init__(self, args, work, arch):
        self.args, self.name = args, arch
        data = os.path.join(work, arch + "-data")
        os.makedirs(data)
        settings = argparse.Namespace(collage=args.collage, arch=arch, data_seed=1, steps=STEP,
                                      eval_interval=STEP, precision="collage-plus",
                                      backend="cpu")
        text, _ = equivalence.write_encoder_data(data, settings)
        self.vocab_file = os.path.join(data, "vocab.txt")
        with open(self.vocab_file) as f:
            self.vocab = sum(1 for _ in f)  # model.vocab_size: the vocab's tokens
        self.config = os.path.join(work, arch + ".yaml")
        with open(self.config, "w") as f:
            f.write(text)
        self.run_dir = os.path.join(work, arch)
        run([args.collage, "train", self.config, "--set", "logging.dir=" + self.run_dir,
             "--set", "checkpoint.interval=%d" % STEP, "--set", "data.vocab_file=" +
             self.vocab_file, "--set", "parallel.threads=2"])
        self.checkpoints = os.path.join(self.run_dir, "checkpoints")
        self.last = os.path.join(self.checkpoints, "step_%08d.ckpt" % STEP)

    def export(self, source, out, *extra):
        result = run([self.args.collage, "export", source, "--output", out] + list(extra))
        print(result.stdout.rstrip())
        return result


# ---- config.json and the tensors ---------------------------------------------------------

GPT_NEOX = "GPTNeoXForCausalLM"


def expected_config(kind, case):
    """The config.json fields each case must have (the training configs above)."""
    if kind == GPT_NEOX:
        return {"architectures": [GPT_NEOX], "model_type": "gpt_neox", "hidden_size": 64,
                "num_attention_heads": 4, "num_hidden_layers": 2,
                "intermediate_size": case.ffn or 256, "vocab_size": case.vocab,
                "layer_norm_eps": 1e-5, "hidden_act": "gelu_new", "rotary_pct": 1.0,
                "rotary_emb_base": 10000.0, "rope_theta": 10000.0,
                "use_parallel_residual": False, "tie_word_embeddings": case.tied,
                "attention_bias": True, "max_position_embeddings": 32,
                "torch_dtype": "bfloat16"}
    bert = kind == "BertForPreTraining"
    common = {"architectures": [kind], "hidden_size": 64, "num_attention_heads": 4,
              "num_hidden_layers": 2, "intermediate_size": 256, "vocab_size": case.vocab,
              "layer_norm_eps": 1e-12, "hidden_act": "gelu",
              "position_embedding_type": "absolute", "torch_dtype": "bfloat16"}
    common.update({"model_type": "bert", "type_vocab_size": 2, "max_position_embeddings": 32,
                   "pad_token_id": 0} if bert else
                  {"model_type": "roberta", "type_vocab_size": 1, "max_position_embeddings": 34,
                   "pad_token_id": 1})
    return common


SHAPES = {GPT_NEOX: hf.gpt_neox_shapes, "BertForPreTraining": hf.bert_shapes,
          "RobertaForMaskedLM": hf.roberta_shapes}

# Tensors training must have moved from their init (zero biases, unit layernorm weights): one
# of each kind in a wrong place would show in the logits, but not if it were still at its init.
# (Not the key bias: it adds q·b_k to every key's score alike, which the softmax cancels, so its
# gradient is zero and it stays zero.)
TRAINED = {
    GPT_NEOX: (["gpt_neox.layers.0.attention.query_key_value.bias",
                "gpt_neox.layers.1.mlp.dense_4h_to_h.bias", "gpt_neox.final_layer_norm.bias"],
               ["gpt_neox.layers.0.post_attention_layernorm.weight"]),
    "BertForPreTraining": (["bert.encoder.layer.0.attention.self.query.bias",
                            "bert.encoder.layer.1.output.dense.bias", "cls.predictions.bias",
                            "cls.seq_relationship.bias", "bert.pooler.dense.bias"],
                           ["bert.encoder.layer.0.attention.output.LayerNorm.weight",
                            "cls.predictions.transform.LayerNorm.weight"]),
    "RobertaForMaskedLM": (["roberta.encoder.layer.0.attention.self.value.bias",
                            "roberta.encoder.layer.1.intermediate.dense.bias", "lm_head.bias"],
                           ["roberta.embeddings.LayerNorm.weight",
                            "lm_head.layer_norm.weight"]),
}


def check_export(case, kind, out):
    """config.json and the tensors of the export in `out`; returns (tensors, config)."""
    with open(os.path.join(out, "config.json")) as f:
        cfg = json.load(f)
    for key, value in expected_config(kind, case).items():
        hf.check(cfg.get(key, "missing") == value,
                 "%s: config.json %s is %r, expected %r" % (case.name, key,
                                                            cfg.get(key, "missing"), value))
    if kind == GPT_NEOX:
        hf.check(cfg.get("rotary_emb_base") == cfg.get("rope_theta"),
                 "%s: rotary_emb_base and rope_theta differ" % case.name)
    metadata, tensors, _, header, files = hf.read_export(out)
    print("%s: %s in %s" % (case.name, kind, ", ".join(files)))
    shapes = SHAPES[kind](cfg)
    hf.check(set(tensors) == set(shapes),
             "%s: names differ from %s's: extra %s, missing %s" % (
                 case.name, kind, sorted(set(tensors) - set(shapes)),
                 sorted(set(shapes) - set(tensors))))
    for name in sorted(set(tensors) & set(shapes)):
        hf.check(list(tensors[name].shape) == shapes[name],
                 "%s: %s has shape %s, %s's is %s" % (case.name, name,
                                                      list(tensors[name].shape), kind,
                                                      shapes[name]))
    hf.check(all(h["dtype"] == "BF16" for h in header.values()), "%s: not all BF16" % case.name)
    hf.check(metadata.get("format") == "pt", "%s: metadata format %r" % (case.name, metadata))
    biases, norms = TRAINED[kind]
    for name in biases:
        hf.check(name in tensors and tensors[name].float().abs().max() > 1e-3,
                 "%s: %s still zero" % (case.name, name))
    for name in norms:
        hf.check(name in tensors and (tensors[name].float() - 1).abs().max() > 1e-3,
                 "%s: %s still one" % (case.name, name))
    return tensors, cfg


# ---- the inputs --------------------------------------------------------------------------

# Special tokens of equivalence.write_vocab's vocab.txt (bert-base-uncased's layout).
UNK, CLS, SEP = 100, 101, 102

def gpt_inputs(vocab):
    """(B, T) = (3, 16) token ids; rows 1 and 2 end in 5 and 9 pad ids (0), attention_mask 0
    there; row 0 holds the last real vocabulary row."""
    gen = torch.Generator().manual_seed(7)
    B, T = 3, 16
    ids = torch.randint(1, vocab, (B, T), generator=gen)
    ids[0, :3] = torch.tensor([vocab - 1, 0, vocab - 1])
    mask = torch.ones(B, T, dtype=torch.long)
    for b, padding in ((1, 5), (2, 9)):
        ids[b, T - padding:] = 0
        mask[b, T - padding:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def encoder_inputs(vocab, pad, segments):
    """(B, T) = (3, 32) rows [CLS] A [SEP] B [SEP] of 32, 25 and 12 tokens, padded with `pad`
    (attention_mask 0); token type 1 from B through its [SEP] when `segments`. The words are the
    vocabulary's (ids 104..V-1, the last real row included) with a [MASK] and an [UNK]; no real
    token is the pad id, as RoBERTa's positions (counted from ids) need."""
    gen = torch.Generator().manual_seed(11)
    B, T = 3, 32
    ids = torch.full((B, T), pad, dtype=torch.long)
    types = torch.zeros(B, T, dtype=torch.long)
    mask = torch.zeros(B, T, dtype=torch.long)
    for b, (a_words, b_words) in enumerate(((14, 15), (10, 12), (4, 5))):
        row = [CLS] + torch.randint(104, vocab, (a_words,), generator=gen).tolist() + [SEP]
        b_begin = len(row)
        row += torch.randint(104, vocab, (b_words,), generator=gen).tolist() + [SEP]
        ids[b, :len(row)] = torch.tensor(row)
        mask[b, :len(row)] = 1
        if segments:
            types[b, b_begin:len(row)] = 1
    ids[0, 2], ids[0, 3], ids[1, 4] = vocab - 1, equivalence.MASK_ID, UNK
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}


# ---- collage's logits --------------------------------------------------------------------

def write_ints(path, values):
    values.to(torch.int32).numpy().tofile(path)
    return path


def dump(args, work, name, source, inputs, nsp, mode):
    """collage's logits (export_dump_logits): (B, T, V) and, with nsp, (B, 2)."""
    B, T = inputs["input_ids"].shape
    out = os.path.join(work, "%s.%s.logits" % (name, mode))
    files = [write_ints(os.path.join(work, "%s.%s" % (name, key)), inputs[key])
             for key in ("input_ids", "token_type_ids", "attention_mask") if key in inputs]
    cmd = [args.dump_logits, source] + files + [str(B), str(T), out]
    nsp_out = os.path.join(work, "%s.%s.nsp" % (name, mode)) if nsp else "-"
    if len(files) > 1:
        cmd.append(nsp_out)
    run(cmd + [mode])
    logits = torch.from_numpy(np.fromfile(out, dtype=np.float32)).double()
    nsp_logits = (torch.from_numpy(np.fromfile(nsp_out, dtype=np.float32)).double().reshape(B, 2)
                  if nsp else None)
    return logits, nsp_logits


def reference(kind, tensors, cfg, inputs, dtype):
    """The class's forward: (logits (B, T, V), nsp logits (B, 2) or None)."""
    ids = inputs["input_ids"]
    if kind == GPT_NEOX:
        return hf.gpt_neox_forward(tensors, cfg, ids, dtype), None
    if kind == "BertForPreTraining":
        return hf.bert_forward(tensors, cfg, ids, inputs["token_type_ids"],
                               inputs["attention_mask"], dtype)
    return hf.roberta_forward(tensors, cfg, ids, inputs["attention_mask"], dtype,
                              inputs["token_type_ids"]), None


def bf16_rule(name, what, collage_error, torch_error, scale):
    hf.check(collage_error <= BF16_FACTOR * torch_error and
             collage_error <= BF16_SCALE_LIMIT * scale,
             "%s: bf16 %s differ from the reference by %.3g (torch's bf16 forward: %.3g, max "
             "|logit| %.3g)" % (name, what, collage_error, torch_error, scale))


def compare(args, work, case, kind, tensors, cfg, source, inputs):
    """The reference forward on the export vs collage's fp32 and bf16 models on the checkpoint.
    Returns collage's fp32 logits (and NSP logits) for expected.npz."""
    B, T = inputs["input_ids"].shape
    V = cfg["vocab_size"]
    nsp = kind == "BertForPreTraining"
    model_inputs = inputs if kind != GPT_NEOX else {"input_ids": inputs["input_ids"]}
    want, want_nsp = reference(kind, tensors, cfg, model_inputs, torch.float64)
    torch_bf16, torch_bf16_nsp = reference(kind, tensors, cfg, model_inputs, torch.bfloat16)
    scale = want.abs().max().item()
    torch_error = (torch_bf16.double() - want).abs().max().item()
    if kind == GPT_NEOX:
        # With the padding masked, the real positions are unchanged: they never see it.
        masked = hf.gpt_neox_forward(tensors, cfg, inputs["input_ids"], torch.float64,
                                     inputs["attention_mask"])
        real = inputs["attention_mask"].bool()
        hf.check(torch.equal(masked[real], want[real]),
                 "%s: the masked reference differs at real positions" % case.name)
    results, kept = {}, None
    for mode in ("fp32", "bf16"):
        logits, nsp_logits = dump(args, work, case.name, source, model_inputs, nsp, mode)
        if not hf.check(logits.numel() == B * T * V, "%s: %s logits: %d values, expected %d" % (
                case.name, mode, logits.numel(), B * T * V)):
            return None
        logits = logits.reshape(B, T, V)
        results[mode] = (logits - want).abs().max().item()
        if nsp:
            results[mode + " nsp"] = (nsp_logits - want_nsp).abs().max().item()
        if mode == "fp32":
            kept = (logits, nsp_logits)
    print("%s: max |logit| %.3f; max |collage - torch float64|: fp32 %.3g (relative %.3g), "
          "bf16 %.3g (torch's own bf16 forward: %.3g)%s" % (
              case.name, scale, results["fp32"], results["fp32"] / scale, results["bf16"],
              torch_error,
              "; NSP fp32 %.3g, bf16 %.3g (torch's bf16: %.3g, max |logit| %.3g)" % (
                  results["fp32 nsp"], results["bf16 nsp"],
                  (torch_bf16_nsp.double() - want_nsp).abs().max().item(),
                  want_nsp.abs().max().item()) if nsp else ""))
    hf.check(results["fp32"] <= FP32_TOLERANCE, "%s: fp32 logits differ from %s's by %.3g > %g" % (
        case.name, kind, results["fp32"], FP32_TOLERANCE))
    bf16_rule(case.name, "logits", results["bf16"], torch_error, scale)
    if nsp:
        hf.check(results["fp32 nsp"] <= FP32_TOLERANCE,
                 "%s: fp32 NSP logits differ by %.3g > %g" % (case.name, results["fp32 nsp"],
                                                             FP32_TOLERANCE))
        # Two logits a row: torch's own bf16 error on so few values can be near zero by chance,
        # so the yardstick is the larger of it and the MLM logits' (the same encoder's output).
        nsp_torch_error = max((torch_bf16_nsp.double() - want_nsp).abs().max().item(),
                              torch_error)
        bf16_rule(case.name, "NSP logits", results["bf16 nsp"], nsp_torch_error, scale)
    return kept


# ---- expected.npz and shards --------------------------------------------------------------

def tokenizer_sample(args, out, work):
    """(text, collage's ids for it) when the export holds a WordPiece vocab.txt, else None."""
    if not os.path.exists(os.path.join(out, "vocab.txt")):
        return None
    text = "the cat and the dog is a bird of rain"
    path = os.path.join(work, "sample.txt")
    with open(path, "w") as f:
        f.write(text)
    result = run([args.collage, "tokenize", "--tokenizer", "bert-uncased", "--vocab-file",
                  os.path.join(out, "vocab.txt"), path])
    return text, [int(i) for i in result.stdout.split()]


def write_expected(path, inputs, logits, nsp_logits, sample):
    fields = {key: value.numpy().astype(np.int64) for key, value in inputs.items()}
    fields["logits"] = logits.float().numpy()
    if nsp_logits is not None:
        fields["nsp_logits"] = nsp_logits.float().numpy()
    if sample is not None:
        fields["text"] = np.array(sample[0])
        fields["text_ids"] = np.array(sample[1], dtype=np.int64)
    np.savez(path, **fields)
    print("wrote %s (%s)" % (path, ", ".join(sorted(fields))))


def check_sharded(case, single, sharded):
    """An export split by --max-shard-size (read through its index) holds the single file's
    tensors, bit for bit."""
    _, tensors, raw, _, _ = hf.read_export(single)
    _, again, raw_again, _, files = hf.read_export(sharded)
    print("%s: --max-shard-size export in %s" % (case.name, ", ".join(files)))
    hf.check(len(files) >= 2 and os.path.exists(os.path.join(sharded, hf.INDEX_FILE)),
             "%s: the sharded export has %s" % (case.name, sorted(os.listdir(sharded))))
    hf.check(set(again) == set(tensors) and all(raw_again[n] == raw[n] for n in tensors),
             "%s: the sharded export's tensors differ from the single file's" % case.name)
    hf.check(all(os.path.exists(os.path.join(sharded, f)) for f in ("config.json", "vocab.txt")),
             "%s: the sharded export lacks config.json or vocab.txt" % case.name)


# ---- the cases ---------------------------------------------------------------------------

def run_case(args, work, case, kind, source, inputs):
    out = (os.path.join(args.keep, case.name, "export") if args.keep
           else os.path.join(work, "export-" + case.name))
    if args.keep:
        shutil.rmtree(os.path.dirname(out), ignore_errors=True)
        os.makedirs(os.path.dirname(out))
    case.export(source, out)
    tensors, cfg = check_export(case, kind, out)
    if set(tensors) != set(SHAPES[kind](cfg)):
        return out  # the forward needs every tensor: reported above
    kept = compare(args, work, case, kind, tensors, cfg, source, inputs)
    if args.keep and kept is not None:
        expected_inputs = inputs if kind != GPT_NEOX else {"input_ids": inputs["input_ids"]}
        write_expected(os.path.join(os.path.dirname(out), "expected.npz"), expected_inputs,
                       kept[0], kept[1], tokenizer_sample(args, out, work))
    return out


def round_trips_at_tp2(args, work, case, out):
    """The TP=2 export read back: `collage import` then export gives the same files, and a TP=2
    run started from it (--init-from hf:DIR) holds the same weights in its checkpoint set: one
    step at lr 1e-30 moves no bf16 weight (the update lands far below every weight's last bit),
    so the set exports to the same tensors, every shard put back where it came from."""
    imported = os.path.join(work, case.name + "-imported.ckpt")
    run([args.collage, "import", out, "--output", imported])
    again = os.path.join(work, "export-" + case.name + "-again")
    case.export(imported, again)
    for name in ("model.safetensors", "config.json"):
        with open(os.path.join(out, name), "rb") as a, open(os.path.join(again, name), "rb") as b:
            hf.check(a.read() == b.read(), "%s: export -> import -> export changed %s" % (
                case.name, name))
    run_dir = os.path.join(work, case.name + "-from-hf")
    run([args.mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", "-x",
         "OPENBLAS_NUM_THREADS=1", "-x", "OMP_NUM_THREADS=1", args.collage, "train", case.config,
         "--init-from", "hf:" + out, "--set", "optimizer.lr=1.0e-30", "--set",
         "optimizer.min_lr=0", "--set", "training.max_steps=1", "--set",
         "checkpoint.interval=1", "--set", "logging.dir=" + run_dir])
    from_run = os.path.join(work, "export-" + case.name + "-from-hf")
    case.export(os.path.join(run_dir, "checkpoints"), from_run)
    _, first, _, _, _ = hf.read_export(out)
    _, second, _, _, _ = hf.read_export(from_run)
    hf.check(set(first) == set(second) and all(
        torch.equal(first[n].view(torch.int16), second[n].view(torch.int16)) for n in first),
        "%s: a TP=2 run from hf:%s does not hold the export's weights" % (case.name, out))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--collage", required=True)
    parser.add_argument("--dump-logits", required=True)
    parser.add_argument("--mpirun", default="mpirun")
    parser.add_argument("--keep", metavar="DIR",
                        help="keep each export and its expected.npz in DIR/CASE/")
    args = parser.parse_args()
    if args.keep:
        args.keep = os.path.abspath(args.keep)
    work = tempfile.mkdtemp(prefix="collage_export_hf_")
    try:
        equivalence.write_dataset(os.path.join(work, "tokens"))

        # 1. rope, tied, one process: from the checkpoint directory.
        rope = Case(args, work, "rope-tied", 100, "rope", True)
        run_case(args, work, rope, GPT_NEOX, rope.checkpoints, gpt_inputs(100))

        # 2. rope, untied, ffn 96, trained at TP=2: from the set's manifest.
        untied = Case(args, work, "rope-untied-tp2", 100, "rope", False, ffn=96, tp=2)
        hf.check(os.path.isdir(os.path.join(untied.checkpoints, "step_%08d.shards" % STEP)),
                 "rope-untied-tp2: no checkpoint set")
        out = run_case(args, work, untied, GPT_NEOX, untied.last, gpt_inputs(100))
        round_trips_at_tp2(args, work, untied, out)

        # 3. BERT: MLM at every position and NSP, segment B tokens, padding.
        bert = EncoderCase(args, work, "bert")
        out = run_case(args, work, bert, "BertForPreTraining", bert.last,
                       encoder_inputs(bert.vocab, 0, True))
        # BERT's ~250 KB of bf16 in shards of at most 100 KB.
        sharded = os.path.join(work, "export-bert-sharded")
        bert.export(bert.last, sharded, "--max-shard-size", "100KB")
        check_sharded(bert, out, sharded)

        # 4. RoBERTa: positions past the padding id; --dtype float32 widens exactly.
        roberta = EncoderCase(args, work, "roberta")
        out = run_case(args, work, roberta, "RobertaForMaskedLM", roberta.last,
                       encoder_inputs(roberta.vocab, 1, False))
        out32 = os.path.join(work, "export-roberta-f32")
        roberta.export(roberta.last, out32, "--dtype", "float32")
        _, tensors, _, _, _ = hf.read_export(out)
        _, tensors32, _, header32, _ = hf.read_export(out32)
        hf.check(all(h["dtype"] == "F32" for h in header32.values()), "float32: not all F32")
        hf.check(set(tensors32) == set(tensors) and all(
            torch.equal(tensors32[n], tensors[n].float()) for n in tensors),
            "roberta: the float32 export is not the bf16 export widened exactly")
        with open(os.path.join(out32, "config.json")) as f:
            hf.check(json.load(f).get("torch_dtype") == "float32",
                     "roberta float32: config.json torch_dtype")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if hf.failures:
        sys.exit("FAIL: %d check(s) failed" % len(hf.failures))
    print("PASS")


if __name__ == "__main__":
    main()
