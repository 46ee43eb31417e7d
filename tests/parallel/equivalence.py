#!/usr/bin/env python3
"""Parallel layouts reproduce the single-process run (docs/PARALLEL.md, "Equivalence").

Trains the same tiny GPT from the same initial weights on the same data once as one process
and then under `mpirun` in each requested layout (tensor-parallel, data-parallel with and
without ZeRO-1, both), and compares metrics.jsonl step by step: loss, gradient norm and EDQ
ratio. The layouts cannot be bit-identical: tensor parallelism sums partial GEMMs (each rounded
to bf16) in fp32 where one process rounds the whole sum once, and data parallelism accumulates
fewer micro-batches per rank before the fp32 sum over ranks. Those differences are one bf16
rounding (2^-8 relative) of some activations and gradients per step; the tolerances below are
what 20+ steps of them amount to on this model, with room for the chaotic growth of training.

Usage: equivalence.py --collage BIN --precision P [--backend cpu] [--layouts tp2,dp2,...]
"""
import argparse
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

# layout name -> (ranks, overrides)
LAYOUTS = {
    "tp2": (2, ["parallel.tensor_parallel=2"]),
    "dp2": (2, []),
    "dp2-zero": (2, ["parallel.zero=1"]),
    "tp2xdp2": (4, ["parallel.tensor_parallel=2"]),
    "tp2xdp2-zero": (4, ["parallel.tensor_parallel=2", "parallel.zero=1"]),
}

# Allowed differences from the single-process run, per step.
LOSS_RELATIVE = 2e-3  # the loss itself (≈ 3.5 here): a few bf16 roundings of the logits
GRAD_NORM_RELATIVE = 2e-2  # the norm of bf16 gradients summed in another order
EDQ_RATIO_ABSOLUTE = 2e-2  # ⟨Δ, u⟩/‖u‖² near 1: which few updates round away differs
# The step's EDQ itself (⟨Δ, u⟩/‖u‖, a norm over every parameter): counting the replicated
# tensors once per TP rank instead of once would move it by far more than this.
EDQ_RELATIVE = 2e-2
# Parameters with a non-zero update (relative): all but a handful whose update rounds to exactly
# zero (measured: they differ by up to 3 of 106240 between layouts). The replicated tensors are
# 2.8% of this model: counting them once per TP rank would be caught.
UPDATED_RELATIVE = 1e-3


def write_dataset(prefix, documents=300, seed=42):
    """A Megatron MMIDIDX pair (uint16) of noisy counters: a pattern the loss can learn."""
    gen = random.Random(seed)
    sizes, tokens = [], []
    for _ in range(documents):
        n = 40 + gen.randrange(60)
        start = gen.randrange(50)
        doc = [(start + i) % 50 + (1 if gen.randrange(8) == 0 else 0) for i in range(n)]
        sizes.append(n)
        tokens.extend(doc)
    with open(prefix + ".bin", "wb") as f:
        f.write(struct.pack("<%dH" % len(tokens), *tokens))
    pointers, offset = [], 0
    for n in sizes:
        pointers.append(offset)
        offset += 2 * n
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<QBQQ", 1, 8, len(sizes), len(sizes) + 1))
        f.write(struct.pack("<%di" % len(sizes), *sizes))
        f.write(struct.pack("<%dq" % len(sizes), *pointers))
        f.write(struct.pack("<%dq" % (len(sizes) + 1), *range(len(sizes) + 1)))


CONFIG = """
model: {{n_layer: 2, hidden_size: 64, n_head: 4, vocab_size: 64, max_position_embeddings: 32,
        position_embedding: {positions}, tie_embeddings: {tied}}}
data: {{datasets: ["{data}"], seq_len: 16, split: "90,5,5"}}
training: {{micro_batch_size: 2, global_batch_size: 8, max_steps: {steps}, eval_interval: 0,
           log_interval: 100}}
optimizer: {{precision: {precision}, lr: 3.0e-3, min_lr: 3.0e-4, warmup_steps: 3,
            decay_steps: {steps}}}
parallel: {{backend: {backend}, threads: 1}}
logging: {{progress: "off", level: "warn"}}
checkpoint: {{interval: 0, keep: 1}}
"""


def metrics(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def run(cmd, what):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    result = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, timeout=900)
    if result.returncode != 0:
        sys.exit("FAIL %s: exit %d\n%s\n%s" % (what, result.returncode, " ".join(cmd),
                                                result.stdout[-4000:]))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--collage", required=True)
    parser.add_argument("--mpirun", default="mpirun")
    parser.add_argument("--precision", required=True)
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--layouts", default="tp2,dp2,dp2-zero,tp2xdp2")
    parser.add_argument("--positions", default="learned")
    parser.add_argument("--tied", default="true")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="collage_equivalence_")
    try:
        write_dataset(os.path.join(work, "tokens"))
        config = os.path.join(work, "tiny.yaml")
        with open(config, "w") as f:
            f.write(CONFIG.format(data=os.path.join(work, "tokens"), steps=args.steps,
                                  precision=args.precision, backend=args.backend,
                                  positions=args.positions, tied=args.tied))
        single_dir = os.path.join(work, "single")
        run([args.collage, "train", config, "--set", "logging.dir=" + single_dir], "single process")
        reference = metrics(single_dir)
        failures = []
        for name in args.layouts.split(","):
            ranks, overrides = LAYOUTS[name]
            run_dir = os.path.join(work, name)
            cmd = [args.mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks),
                   "-x", "OPENBLAS_NUM_THREADS=1", args.collage, "train", config,
                   "--set", "logging.dir=" + run_dir]
            for o in overrides:
                cmd += ["--set", o]
            run(cmd, name)
            records = metrics(run_dir)
            if len(records) != len(reference):
                failures.append("%s: %d records, single process %d" %
                                (name, len(records), len(reference)))
                continue
            worst = {"loss": 0.0, "grad_norm": 0.0, "edq_ratio": 0.0, "edq": 0.0}
            for a, b in zip(reference, records):
                if "loss" not in a:
                    continue
                loss = abs(a["loss"] - b["loss"]) / abs(a["loss"])
                norm = abs(a["grad_norm"] - b["grad_norm"]) / abs(a["grad_norm"])
                edq = abs(a["edq_ratio"] - b["edq_ratio"])
                edq_value = abs(a["edq"] - b["edq"]) / max(abs(a["edq"]), 1e-30)
                worst = {"loss": max(worst["loss"], loss),
                         "grad_norm": max(worst["grad_norm"], norm),
                         "edq_ratio": max(worst["edq_ratio"], edq),
                         "edq": max(worst["edq"], edq_value)}
                # Which parameters get a non-zero update is the same set in every layout: the
                # count catches a replicated tensor counted once per TP rank.
                if abs(a["updated"] - b["updated"]) > UPDATED_RELATIVE * a["updated"]:
                    failures.append("%s step %d: %d parameters updated, single process %d" %
                                    (name, a["step"], b["updated"], a["updated"]))
                if (loss > LOSS_RELATIVE or norm > GRAD_NORM_RELATIVE or edq > EDQ_RATIO_ABSOLUTE
                        or edq_value > EDQ_RELATIVE):
                    failures.append(
                        "%s step %d: loss %.6f vs %.6f, grad norm %.5f vs %.5f, edq_ratio %.4f "
                        "vs %.4f, edq %.5g vs %.5g" %
                        (name, a["step"], b["loss"], a["loss"], b["grad_norm"], a["grad_norm"],
                         b["edq_ratio"], a["edq_ratio"], b["edq"], a["edq"]))
            print("%-14s %s %s over %d steps: max relative loss difference %.2e, grad norm "
                  "%.2e, edq %.2e; edq_ratio absolute %.2e" %
                  (name, args.precision, args.backend, args.steps, worst["loss"],
                   worst["grad_norm"], worst["edq"], worst["edq_ratio"]))
        last, first = reference[-1]["loss"], reference[1]["loss"]
        if not last < first - 0.5:
            failures.append("the single-process loss did not fall (%.3f -> %.3f): nothing was "
                            "compared" % (first, last))
        if failures:
            sys.exit("FAIL\n" + "\n".join(failures))
        print("OK")
    finally:
        if args.keep:
            print("work directory:", work)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
