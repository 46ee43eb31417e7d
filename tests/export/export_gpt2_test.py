#!/usr/bin/env python3
"""`collage export` against GPT-2's forward written out in torch (src/tools/export.h).

Three tiny GPTs are trained a few steps (collage-plus, so the weights are the trained bf16
values, biases and layernorms away from their init) and exported:

1. learned positions, tied embeddings, GPT-2's vocabulary (50257 rows of a padded 50304), one
   process, tokenizer files in its config; exported from the checkpoint directory. GPT2LMHeadModel names.
2. learned positions, untied, a small vocabulary and ffn_hidden_size 96, trained under mpirun at
   tensor-parallel 2; exported from the set's manifest. GPT2LMHeadModel names with lm_head.weight.
3. rope, untied; exported from the checkpoint file with --names collage: collage's names
   (its GPTNeoXForCausalLM export is checked by export_hf_test.py).

For each, model.safetensors is parsed by hand (json + numpy; BF16 read as int16 and viewed as
torch.bfloat16) and checked: header layout, names, shapes, metadata, values bit for bit against
the checkpoint's (transposed where GPT-2's Conv1D keeps (in, out)). For the GPT2LMHeadModel exports
config.json is checked field by field, and GPT-2's forward (embeddings + positions, pre-LN
blocks, causal attention, gelu_new, final LN, tied or separate head), computed in float64 from
the export alone, is compared with collage's own logits for the same tokens
(export_dump_logits): the fp32 model (GptT<float>, the same bf16 weights widened) must agree to
FP32_TOLERANCE; the bf16 model as it trains within the error torch's own bf16 forward makes
(see BF16_* below). --dtype float32 must widen exactly, and --force must replace an earlier
export's files.

Usage: export_gpt2_test.py --collage BIN --dump-logits BIN [--mpirun MPIRUN]
Needs torch and numpy (Debian: python3-torch, /usr/bin/python3): fails, never skips, without.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError as error:
    sys.exit("FAIL: export_gpt2_test.py needs torch and numpy (%s): install Debian's "
             "python3-torch (scripts/install-deps.sh) and run it with /usr/bin/python3" % error)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "parallel"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from equivalence import write_dataset  # noqa: E402
# GPT-2's forward and the files read by hand (hf_reference.py), failures collected by check().
from hf_reference import (bf16_of, check, failures, gpt2_forward, gpt2_names,  # noqa: E402
                          read_checkpoint, read_safetensors)

# collage's fp32 model against float64: only the summation order differs (measured ~2e-6).
FP32_TOLERANCE = 1e-4
# The bf16 model rounds every stored activation to 8 significant bits (u = 2^-9 relative), so
# its logits differ from the exact ones by a few u of the logits' scale. The bound is stated
# against an independent bf16 computation: torch's forward with weights and activations in
# bfloat16 (its own rounding points) against float64. Collage's error must be within
# BF16_FACTOR times torch's, and within BF16_SCALE_LIMIT of the largest |logit|.
BF16_FACTOR = 2.0
BF16_SCALE_LIMIT = 0.05

CONFIG = """
model: {{n_layer: 2, hidden_size: 64, n_head: 4, vocab_size: {vocab}, max_position_embeddings: 32,
        position_embedding: {positions}, tie_embeddings: {tied}, ffn_hidden_size: {ffn},
        layernorm_eps: 1.0e-5}}
data: {{datasets: ["{data}"], seq_len: 16, split: "90,5,5"{tokenizer}}}
training: {{micro_batch_size: 2, global_batch_size: 4, max_steps: 20, eval_interval: 0,
           log_interval: 10}}
optimizer: {{precision: collage-plus, lr: 1.0e-2, min_lr: 1.0e-3, warmup_steps: 2,
            decay_steps: 20, weight_decay: 0.0}}
parallel: {{backend: cpu, threads: 2, tensor_parallel: {tp}}}
logging: {{progress: "off", dir: "{run}"}}
checkpoint: {{interval: 10, keep: 2}}
"""

def run(cmd, expect=0):
    env = dict(os.environ, OMP_NUM_THREADS="2", OPENBLAS_NUM_THREADS="1")
    result = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, timeout=240)
    if expect is not None and result.returncode != expect:
        sys.exit("FAIL: %s exited %d (expected %d)\n%s" % (" ".join(cmd), result.returncode,
                                                            expect, result.stdout[-4000:]))
    return result


# collage name -> (GPT-2 name, transposed)
def hf_source(name):
    if name in ("lm_head.weight",):
        return name, False
    pairs = {"attn.qkv": ("attn.c_attn", True), "attn.proj": ("attn.c_proj", True),
             "mlp.fc1": ("mlp.c_fc", True), "mlp.fc2": ("mlp.c_proj", True)}
    for collage, (hf, transposed) in pairs.items():
        if "." + collage + "." in "." + name:
            return "transformer." + name.replace(collage, hf), transposed and name.endswith("weight")
    return "transformer." + name, False


class Case:
    def __init__(self, args, work, name, vocab, positions, tied, ffn=0, tp=1, tokenizer=False):
        self.args, self.work, self.name = args, work, name
        self.vocab, self.tied, self.ffn = vocab, tied, ffn
        self.run_dir = os.path.join(work, name)
        tokenizer_keys = ""
        if tokenizer:
            self.vocab_file = os.path.join(work, "encoder.json")
            self.merges_file = os.path.join(work, "vocab.bpe")
            tokenizer_keys = ', vocab_file: "%s", merges_file: "%s"' % (self.vocab_file,
                                                                       self.merges_file)
        self.config = os.path.join(work, name + ".yaml")
        with open(self.config, "w") as f:
            f.write(CONFIG.format(vocab=vocab, positions=positions, tied=str(tied).lower(),
                                  ffn=ffn, data=os.path.join(work, "tokens"), tp=tp,
                                  run=self.run_dir, tokenizer=tokenizer_keys))
        cmd = [args.collage, "train", self.config]
        if tp > 1:
            cmd = [args.mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(tp), "-x",
                   "OPENBLAS_NUM_THREADS=1", "-x", "OMP_NUM_THREADS=1"] + cmd
        run(cmd)
        self.checkpoints = os.path.join(self.run_dir, "checkpoints")
        self.last = os.path.join(self.checkpoints, "step_00000020.ckpt")

    def export(self, source, out, *extra, expect=0):
        result = run([self.args.collage, "export", source, "--output", out] + list(extra), expect)
        print(result.stdout.rstrip())
        return result


def check_metadata(case, metadata, naming):
    check(metadata.get("format") == "pt", "%s: metadata format %r" % (case.name, metadata))
    check(metadata.get("step") == "20", "%s: metadata step %r" % (case.name, metadata.get("step")))
    check(metadata.get("precision") == "collage-plus", "%s: metadata precision" % case.name)
    check(metadata.get("naming") == naming, "%s: metadata naming %r" % (case.name, naming))
    check(metadata.get("collage_version", "").startswith("0."), "%s: collage_version" % case.name)
    check("n_layer: 2" in metadata.get("collage_config", ""), "%s: collage_config" % case.name)


def check_hf_export(case, out, checkpoint_tensors=None):
    metadata, tensors, raw, header = read_safetensors(os.path.join(out, "model.safetensors"))
    check_metadata(case, metadata, "GPT2LMHeadModel")
    check(set(tensors) == gpt2_names(2, case.tied),
          "%s: names differ from GPT-2's: extra %s, missing %s" % (
              case.name, sorted(set(tensors) - gpt2_names(2, case.tied)),
              sorted(gpt2_names(2, case.tied) - set(tensors))))
    F_ = case.ffn or 256
    shapes = {"transformer.wte.weight": [case.vocab, 64], "transformer.wpe.weight": [32, 64],
              "transformer.h.1.attn.c_attn.weight": [64, 192],
              "transformer.h.1.attn.c_attn.bias": [192],
              "transformer.h.1.attn.c_proj.weight": [64, 64],
              "transformer.h.0.mlp.c_fc.weight": [64, F_], "transformer.h.0.mlp.c_fc.bias": [F_],
              "transformer.h.0.mlp.c_proj.weight": [F_, 64], "transformer.ln_f.bias": [64]}
    if not case.tied:
        shapes["lm_head.weight"] = [case.vocab, 64]
    for name, shape in shapes.items():
        check(list(tensors[name].shape) == shape,
              "%s: %s has shape %s, GPT-2's is %s" % (case.name, name, list(tensors[name].shape),
                                                      shape))
    check(all(h["dtype"] == "BF16" for h in header.values()), "%s: not all BF16" % case.name)
    # The values, bit for bit: each collage tensor (transposed for Conv1D, vocab rows trimmed).
    if checkpoint_tensors is not None:
        for name, (dtype, shape, data) in checkpoint_tensors.items():
            if name.startswith("optimizer."):
                continue
            hf, transposed = hf_source(name)
            expected = bf16_of(data, shape)
            if name in ("wte.weight", "lm_head.weight"):
                check(not expected[case.vocab:].view(torch.int16).any(),
                      "%s: padding rows of %s are not zero" % (case.name, name))
                expected = expected[:case.vocab]
            if transposed:
                expected = expected.T
            check(torch.equal(tensors[hf].view(torch.int16), expected.contiguous().view(torch.int16)),
                  "%s: %s is not %s%s of the checkpoint" % (case.name, hf, name,
                                                           "ᵀ" if transposed else ""))
    # The training moved every kind of tensor away from its init (zero biases, unit layernorms):
    # a bias or layernorm in the wrong place would show in the logits.
    for name in ("transformer.h.0.attn.c_attn.bias", "transformer.h.1.mlp.c_proj.bias",
                 "transformer.ln_f.bias"):
        check(tensors[name].float().abs().max() > 1e-3, "%s: %s still zero" % (case.name, name))
    check((tensors["transformer.h.0.ln_2.weight"].float() - 1).abs().max() > 1e-3,
          "%s: ln_2.weight still one" % case.name)

    with open(os.path.join(out, "config.json")) as f:
        cfg = json.load(f)
    gpt2_vocab = case.vocab == 50257
    expected = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"],
                "vocab_size": case.vocab, "n_positions": 32, "n_ctx": 32, "n_embd": 64,
                "n_layer": 2, "n_head": 4, "n_inner": case.ffn or None,
                "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
                "initializer_range": 0.02, "bos_token_id": 50256 if gpt2_vocab else None,
                "eos_token_id": 50256 if gpt2_vocab else None, "torch_dtype": "bfloat16",
                "tie_word_embeddings": case.tied, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
                "attn_pdrop": 0.0, "scale_attn_weights": True,
                "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False}
    for key, value in expected.items():
        check(cfg.get(key, "missing") == value,
              "%s: config.json %s is %r, expected %r" % (case.name, key, cfg.get(key, "missing"),
                                                         value))
    return tensors, cfg


def compare_logits(case, tensors, cfg, source):
    """GPT-2 in torch on the export vs collage's fp32 and bf16 models on the checkpoint."""
    gen = torch.Generator().manual_seed(7)
    B, T = 3, 32
    ids = torch.randint(0, case.vocab, (B, T), generator=gen)
    ids[0, :3] = torch.tensor([case.vocab - 1, 0, case.vocab - 1])  # the last real vocab row
    tokens = os.path.join(case.work, case.name + ".tokens")
    ids.to(torch.int32).numpy().tofile(tokens)
    reference = gpt2_forward(tensors, cfg, ids, torch.float64)
    scale = reference.abs().max().item()
    torch_bf16 = gpt2_forward(tensors, cfg, ids, torch.bfloat16).double()
    torch_bf16_error = (torch_bf16 - reference).abs().max().item()
    results = {}
    for mode in ("fp32", "bf16"):
        out = os.path.join(case.work, "%s.%s.logits" % (case.name, mode))
        run([case.args.dump_logits, source, tokens, str(B), str(T), out, mode])
        collage = torch.from_numpy(np.fromfile(out, dtype=np.float32)).double()
        check(collage.numel() == B * T * case.vocab, "%s: %s logits: %d values" % (
            case.name, mode, collage.numel()))
        diff = (collage.reshape(B, T, case.vocab) - reference).abs().max().item()
        results[mode] = diff
    print("%s: max |logit| %.3f; max |collage - torch float64|: fp32 %.3g, bf16 %.3g "
          "(torch's own bf16 forward: %.3g)" % (case.name, scale, results["fp32"],
                                                results["bf16"], torch_bf16_error))
    check(results["fp32"] <= FP32_TOLERANCE,
          "%s: fp32 logits differ from GPT-2's by %.3g > %g" % (case.name, results["fp32"],
                                                                FP32_TOLERANCE))
    check(results["bf16"] <= BF16_FACTOR * torch_bf16_error and
          results["bf16"] <= BF16_SCALE_LIMIT * scale,
          "%s: bf16 logits differ from GPT-2's by %.3g (torch's bf16 forward: %.3g, max |logit| "
          "%.3g)" % (case.name, results["bf16"], torch_bf16_error, scale))
    return results


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--collage", required=True)
    parser.add_argument("--dump-logits", required=True)
    parser.add_argument("--mpirun", default="mpirun")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="collage_export_")
    try:
        write_dataset(os.path.join(work, "tokens"))
        with open(os.path.join(work, "encoder.json"), "w") as f:
            json.dump({"!": 0, "<|endoftext|>": 50256}, f)
        with open(os.path.join(work, "vocab.bpe"), "w") as f:
            f.write("#version: 0.2\nĠ t\n")

        # 1. learned, tied, GPT-2's vocabulary: from the checkpoint directory.
        tied = Case(args, work, "tied", 50257, "learned", True, tokenizer=True)
        out = os.path.join(work, "export-tied")
        tied.export(tied.checkpoints, out)
        tensors, cfg = check_hf_export(tied, out, read_checkpoint(tied.last))
        compare_logits(tied, tensors, cfg, tied.checkpoints)
        for source, name in ((tied.vocab_file, "vocab.json"), (tied.merges_file, "merges.txt")):
            check(open(source, "rb").read() == open(os.path.join(out, name), "rb").read(),
                  "tied: %s is not a copy of %s" % (name, source))
        with open(os.path.join(out, "tokenizer_config.json")) as f:
            check(json.load(f) == {"tokenizer_class": "GPT2Tokenizer", "bos_token": "<|endoftext|>",
                                   "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>",
                                   "model_max_length": 32}, "tied: tokenizer_config.json")
        # float32 widens exactly.
        out32 = os.path.join(work, "export-tied-f32")
        tied.export(tied.last, out32, "--dtype", "float32")
        _, tensors32, _, header32 = read_safetensors(os.path.join(out32, "model.safetensors"))
        check(all(h["dtype"] == "F32" for h in header32.values()), "float32: not all F32")
        check(set(tensors32) == set(tensors) and all(
            torch.equal(tensors32[n], tensors[n].float()) for n in tensors),
            "float32 export is not the bf16 export widened exactly")
        with open(os.path.join(out32, "config.json")) as f:
            check(json.load(f)["torch_dtype"] == "float32", "float32: config.json torch_dtype")

        # 2. learned, untied, small vocabulary, ffn 96, trained at TP=2: from the set's manifest.
        untied = Case(args, work, "untied-tp2", 100, "learned", False, ffn=96, tp=2)
        check(os.path.isdir(os.path.join(untied.checkpoints, "step_00000020.shards")),
              "untied-tp2: no checkpoint set")
        out = os.path.join(work, "export-untied")
        untied.export(untied.last, out)
        tensors, cfg = check_hf_export(untied, out)
        compare_logits(untied, tensors, cfg, untied.last)
        check(not os.path.exists(os.path.join(out, "vocab.json")),
              "untied-tp2: tokenizer files without data.vocab_file")

        # 3. rope, untied: collage names, values equal to the checkpoint's.
        rope = Case(args, work, "rope", 64, "rope", False)
        out = os.path.join(work, "export-rope")
        result = rope.export(rope.last, out, "--names", "collage")
        check("collage names: --names collage" in result.stdout,
              "rope: the log does not say why collage names")
        metadata, tensors, raw, header = read_safetensors(os.path.join(out, "model.safetensors"))
        check_metadata(rope, metadata, "collage")
        saved = {n: t for n, t in read_checkpoint(rope.last).items()
                 if not n.startswith("optimizer.")}
        check(set(tensors) == set(saved), "rope: names differ from the checkpoint's: %s" % (
            sorted(set(tensors) ^ set(saved))))
        for name, (dtype, shape, data) in saved.items():
            check(header[name]["shape"] == shape and header[name]["dtype"] == "BF16" and
                  raw[name] == data, "rope: %s differs from the checkpoint's" % name)
        check("wpe.weight" not in tensors and list(tensors["lm_head.weight"].shape) == [128, 64],
              "rope: unexpected tensors or shapes")
        check(sorted(os.listdir(out)) == ["model.safetensors"], "rope: files %s" % os.listdir(out))

        # --force over a GPT2LMHeadModel export: its files replaced, stale ones removed, others kept.
        out = os.path.join(work, "export-tied")
        with open(os.path.join(out, "notes.txt"), "w") as f:
            f.write("mine")
        refused = rope.export(rope.last, out, "--names", "collage", expect=1)
        check("is not empty" in refused.stdout and "--force" in refused.stdout,
              "export into a non-empty directory: %s" % refused.stdout)
        rope.export(rope.last, out, "--names", "collage", "--force")
        check(sorted(os.listdir(out)) == ["model.safetensors", "notes.txt"],
              "--force left %s" % sorted(os.listdir(out)))
        check(read_safetensors(os.path.join(out, "model.safetensors"))[0]["naming"] == "collage",
              "--force did not replace model.safetensors")
        check(not any(n.startswith(".") for n in os.listdir(work)), "staging directory left")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if failures:
        sys.exit("FAIL: %d check(s) failed" % len(failures))
    print("PASS")


if __name__ == "__main__":
    main()
