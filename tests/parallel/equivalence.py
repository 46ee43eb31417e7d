#!/usr/bin/env python3
"""Parallel layouts reproduce the single-process run (docs/PARALLEL.md §8).

Trains the same tiny model from the same initial weights on the same data once as one process
and then under `mpirun` in each requested layout (tensor-parallel, data-parallel with and
without ZeRO-1, both), and compares metrics.jsonl step by step: loss, gradient norm and EDQ
ratio (and the validation figures); and ZeRO-1 with plain DP at the same layout, exactly
(ZERO_PAIRS). The layouts cannot be bit-identical to one process: tensor parallelism sums
partial GEMMs (each rounded to bf16) in fp32 where one process rounds the whole sum once, and
data parallelism accumulates fewer micro-batches per rank before the fp32 sum over ranks. Those
differences are one bf16 rounding (2^-8 relative) of some activations and gradients per step;
the tolerances below are what 20+ steps of them amount to on this model, with room for the
chaotic growth of training.

--arch gpt (default): a tiny GPT on a Megatron .bin/.idx pair of noisy counters.
--arch bert | roberta: a tiny encoder on BERT pretraining HDF5 shards the script makes with the
real tools: a WordPiece vocab.txt and a text corpus of topics (write_encoder_corpus), turned into
shards by `collage prepare-bert`. Dropout is on (its masks are keyed by sample, so every layout
draws the same ones), RoBERTa masks dynamically, and validation runs on every data-parallel rank;
its figures are compared too.

Usage: equivalence.py --collage BIN --precision P [--arch gpt|bert|roberta] [--backend cpu]
                      [--layouts tp2,dp2,...]
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
import time

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

# metrics.jsonl key -> ("relative" | "absolute", allowed difference), compared on every step that
# has the key.
GPT_CHECKS = {
    "loss": ("relative", LOSS_RELATIVE),
    "grad_norm": ("relative", GRAD_NORM_RELATIVE),
    "edq_ratio": ("absolute", EDQ_RATIO_ABSOLUTE),
    "edq": ("relative", EDQ_RELATIVE),
    # Validated at step 0 and after the last step (whose update no training loss sees).
    "val_loss": ("relative", LOSS_RELATIVE),
}

# The encoders (2 layers, hidden 64, 4 heads, dropout 0.1; 8 sequences of 32 tokens a step,
# ~35 of them labelled, in 4 micro-batches of 2; 48 steps; validation every 12 steps over 32
# rows). Measured worst differences from the single process over all five layouts and 7 corpus
# seeds (--data-seed 1..7), BERT collage-plus / RoBERTa collage-light on the cpu:
#   loss, mlm_loss   6.8e-4 / 8.3e-4 relative   nsp_loss          2.2e-3 relative (8 sequences)
#   grad_norm        3.3e-3 / 3.3e-3 relative   val_loss, val_mlm_loss  2.1e-4 / 1.9e-4 relative
#   edq              9.8e-3 / 6.4e-3 relative   val_nsp_loss      6.8e-4 relative
#   edq_ratio        9.9e-3 / 5.5e-3 absolute   accuracies        at most 1 prediction apart
# Where they come from: under TP the row-parallel proj and fc2 add two bf16-rounded partial
# products where one process rounds the whole sum once, and the vocab-parallel MLM loss combines
# per-rank maxima and Σexp; under DP each rank accumulates 2 micro-batches of bf16 gradients
# instead of 4 before the sum over ranks. Each moves a few activations or gradient elements by
# one bf16 ulp (2^-8 relative) a step, and training carries the differences forward. The losses
# are means over few labels (NSP: 8 sequences), so they move more than the GPT's. EDQ differs
# most in the last steps: as the learning rate falls, more of each update is under half an ulp
# of its weight (lost_frac ≈ 0.4 at the end), so the realised update is decided by the few
# elements that cross a rounding boundary, and which ones do follows the gradient's last bits.
# (With min_lr 3e-4 instead of 1e-3, lost_frac reaches 0.7 and EDQ differs by 1.7e-2: that is
# why the runs end at lr 1e-3; the runs' losses are as close either way.) The tolerances are
# 2-3 times the measured worst.
ENCODER_CHECKS = {
    "loss": ("relative", 2e-3),
    "mlm_loss": ("relative", 2e-3),
    "nsp_loss": ("relative", 5e-3),  # BERT only
    "grad_norm": ("relative", 1e-2),
    "edq_ratio": ("absolute", 2e-2),
    "edq": ("relative", 2e-2),
    "val_loss": ("relative", 1e-3),
    "val_mlm_loss": ("relative", 1e-3),
    "val_nsp_loss": ("relative", 2e-3),  # BERT only
}
# Validation accuracies are counts: a prediction whose top two logits are within a rounding of
# each other may flip. val_mlm_accuracy = right / labelled tokens (counted from the validation
# file, mlm_label_counts), val_nsp_accuracy = right / sequences: each may differ by one
# prediction at most.
# ZeRO-1 reproduces plain DP bit for bit (docs/PARALLEL.md §4, §8), for the GPT and the encoders
# alike: the same weights, so the same losses, counts of updated and lost parameters (lost_frac
# is their quotient) and validation figures. The gradient norm and EDQ are fp64 sums added in
# another order with ZeRO-1 (each rank's shard, then over every rank, rather than all of it, then
# over the TP group): equal but for a double's last bits (measured: up to 6.7e-16 relative).
ZERO_PAIRS = (("dp2", "dp2-zero"), ("tp2xdp2", "tp2xdp2-zero"))
EXACT_KEYS = ("loss", "mlm_loss", "nsp_loss", "updated", "lost_frac", "val_loss", "val_mlm_loss",
              "val_mlm_accuracy", "val_nsp_loss", "val_nsp_accuracy")
DOUBLE_KEYS = ("grad_norm", "edq", "edq_ratio", "edq_ratio_cumulative")


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
training: {{micro_batch_size: 2, global_batch_size: 8, max_steps: {steps},
           eval_interval: {steps}, eval_iters: 4, log_interval: 100}}
optimizer: {{precision: {precision}, lr: 3.0e-3, min_lr: 3.0e-4, warmup_steps: 3,
            decay_steps: {steps}}}
parallel: {{backend: {backend}, threads: 1}}
logging: {{progress: "off", level: "warn"}}
checkpoint: {{interval: 0, keep: 1}}
"""

# The encoders' language: documents about one topic each. A sentence is 5..9 words, a third of
# them function words shared by every topic ("the" most of all), the rest words of the
# document's topic with Zipf-like frequencies. A fresh model's MLM loss (ln 159 = 5.07) falls
# within a few dozen steps to the words' frequencies (≈ 3.5), with "the" the clear favourite:
# the validation predictions are not a near-tie between equally frequent words, which a
# rounding could flip all at once. Reading the topic from the other words (and NSP from
# whether A's and B's topics agree) takes this tiny model hundreds of steps more: that
# transition is chaotic (a step's loss moves by 1% between two single-process runs that only
# use different thread counts), so the runs here stop before it.
SHARED_WORDS = ["the", "a", "and", "of", "is"]
SHARED_WEIGHTS = [8, 3, 2, 1, 1]
TOPICS = [
    "cat dog horse cow sheep bird fish mouse goat duck".split(),
    "rain snow wind sun cloud storm fog ice heat cold".split(),
    "bread apple cheese soup rice milk egg meat cake pear".split(),
    "street car bus train road bridge tower shop park house".split(),
    "boat ship wave shore sand sail port reef tide whale".split(),
]
MASK_ID = 103
SPECIAL_IDS = [0, 100, 101, 102, 103]  # [PAD] [UNK] [CLS] [SEP] [MASK]


def write_vocab(path):
    """A WordPiece vocab.txt laid out as bert-base-uncased's: [PAD] 0, [unused0..98] 1..99,
    [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103, then the words. Returns its size."""
    tokens = (["[PAD]"] + ["[unused%d]" % i for i in range(99)] +
              ["[UNK]", "[CLS]", "[SEP]", "[MASK]"] + SHARED_WORDS +
              [w for topic in TOPICS for w in topic])
    with open(path, "w") as f:
        f.write("\n".join(tokens) + "\n")
    return len(tokens)


def write_encoder_corpus(path, documents, seed):
    """prepare-bert's input: one sentence per line, a blank line between documents."""
    gen = random.Random(seed)
    zipf = [1.0 / (k + 1) for k in range(len(TOPICS[0]))]
    with open(path, "w") as f:
        for _ in range(documents):
            topic = TOPICS[gen.randrange(len(TOPICS))]
            for _ in range(4 + gen.randrange(5)):
                words = [gen.choices(SHARED_WORDS, SHARED_WEIGHTS)[0] if gen.random() < 1 / 3
                         else gen.choices(topic, zipf)[0] for _ in range(5 + gen.randrange(5))]
                f.write(" ".join(words) + "\n")
            f.write("\n")


ENCODER_CONFIG = """
model: {{arch: {arch}, n_layer: 2, hidden_size: 64, n_head: 4, vocab_size: {vocab},
        max_position_embeddings: {positions}, type_vocab_size: {types}, pad_token_id: {pad},
        layernorm_eps: 1.0e-12, hidden_dropout: 0.1, attention_dropout: 0.1}}
data: {{hdf5_train: "{train}", hdf5_valid: "{valid}", seq_len: {seq_len},
       max_predictions: {predictions}, dynamic_masking: {dynamic}, mask_token_id: {mask},
       special_token_ids: {special}}}
training: {{micro_batch_size: {micro_batch}, global_batch_size: {global_batch}, max_steps: {steps},
           eval_interval: {eval_interval}, eval_iters: {eval_iters}, log_interval: 100}}
optimizer: {{precision: {precision}, adam_order: hf, lr: 3.0e-3, min_lr: 1.0e-3,
            weight_decay: 0.01, beta2: 0.999, eps: 1.0e-6, schedule: linear, warmup_steps: 3,
            decay_steps: {steps}}}
parallel: {{backend: {backend}, threads: 1}}
logging: {{progress: "off", level: "warn"}}
checkpoint: {{interval: 0, keep: 1}}
"""
ENCODER_SEQ_LEN = 32
MAX_PREDICTIONS = 5
ENCODER_MICRO_BATCH = 2
ENCODER_GLOBAL_BATCH = 8  # 4 micro-batches: 2 per rank at DP = 2
TRAIN_DOCUMENTS = 24
# Validation reads every row of its file once (eval_iters = VALID_ROWS / micro-batch), data-
# parallel rank r the micro-batches i ≡ r (mod dp): all ranks validate, and the labels counted
# from the file are the ones validated.
VALID_ROWS = 32


def write_encoder_data(work, args):
    """Vocab, corpus and shards made by `collage prepare-bert`: training in several shards (so
    micro-batches cross shard boundaries), validation in one file of exactly the rows one
    validation reads. Returns the config's text and that file's rows (inspect_rows)."""
    vocab = os.path.join(work, "vocab.txt")
    vocab_size = write_vocab(vocab)
    shards = {}
    # train: 300 instances (corpus seed 1) in 9 shards of 37 rows (odd, so some of the 2-sample
    # micro-batches straddle two shards; 48 steps of 8 samples also run into the second epoch's
    # order); valid: its first shard of VALID_ROWS.
    for name, documents, seed, shard_size in (("train", TRAIN_DOCUMENTS, args.data_seed, 37),
                                              ("valid", 6, args.data_seed + 1, VALID_ROWS)):
        text = os.path.join(work, name + ".txt")
        write_encoder_corpus(text, documents, seed)
        shards[name] = os.path.join(work, name)
        run([args.collage, "prepare-bert", "--input", text, "--output-dir", shards[name],
             "--vocab-file", vocab, "--max-seq-length", str(ENCODER_SEQ_LEN),
             "--max-predictions-per-seq", str(MAX_PREDICTIONS), "--shard-size", str(shard_size),
             "--seed", str(seed), "--threads", "1"], "prepare-bert " + name)
    train_shards = [f for f in os.listdir(shards["train"]) if f.endswith(".hdf5")]
    if len(train_shards) < 3:
        sys.exit("FAIL prepare-bert made %d training shard(s), the test wants several" %
                 len(train_shards))
    valid = os.path.join(shards["valid"], "part_00000.hdf5")
    rows = inspect_rows(args.collage, valid)
    if len(rows) != VALID_ROWS:
        sys.exit("FAIL %s holds %d rows, the test wants %d" % (valid, len(rows), VALID_ROWS))
    roberta = args.arch == "roberta"
    pad = 1 if roberta else 0  # RoBERTa's <pad> is 1: its positions run from pad + 1
    text = ENCODER_CONFIG.format(
        arch=args.arch, vocab=vocab_size,
        positions=ENCODER_SEQ_LEN + pad + 1 if roberta else ENCODER_SEQ_LEN,
        types=1 if roberta else 2, pad=pad, train=shards["train"], valid=valid,
        seq_len=ENCODER_SEQ_LEN, predictions=MAX_PREDICTIONS,
        dynamic="true" if roberta else "false", mask=MASK_ID, special=json.dumps(SPECIAL_IDS),
        micro_batch=ENCODER_MICRO_BATCH, global_batch=ENCODER_GLOBAL_BATCH,
        eval_iters=VALID_ROWS // ENCODER_MICRO_BATCH, steps=args.steps,
        eval_interval=args.eval_interval, precision=args.precision, backend=args.backend)
    return text, rows


def inspect_rows(collage, path):
    """Every row of one HDF5 file, as `collage inspect FILE --decode i` prints it."""
    rows = []
    while True:
        result = subprocess.run([collage, "inspect", path, "--decode", str(len(rows))],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if result.returncode != 0:
            if rows and "has samples 0 .. %d" % (len(rows) - 1) in result.stdout:
                return rows
            sys.exit("FAIL collage inspect %s --decode %d\n%s" % (path, len(rows),
                                                                  result.stdout[-2000:]))
        row = {}
        for line in result.stdout.splitlines():
            key, _, values = line.strip().partition(":")
            if key in ("input_ids", "input_mask", "masked_lm_positions", "masked_lm_ids"):
                row[key] = [int(v) for v in values.split()]
        rows.append(row)


def mlm_label_counts(rows, dynamic):
    """(fewest, most) masked-LM labels one validation over `rows` can have: the file's labels,
    or with dynamic masking each row's min(P, ⌊0.15·n + u⌋) of its n maskable tokens
    (dynamic_masking.h), u in [0, 1) unknown here."""
    if not dynamic:
        n = sum(len(r["masked_lm_positions"]) for r in rows)
        return n, n
    fewest = most = 0
    for r in rows:
        ids = list(r["input_ids"])
        for position, label in zip(r["masked_lm_positions"], r["masked_lm_ids"]):
            ids[position] = label
        n = sum(1 for i, m in zip(ids, r["input_mask"]) if m and i not in SPECIAL_IDS)
        fewest += min(int(0.15 * n), n, MAX_PREDICTIONS)
        most += min(int(0.15 * n) + 1, n, MAX_PREDICTIONS)
    return fewest, most


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


def difference(kind, a, b):
    if kind == "relative":
        return abs(a - b) / max(abs(a), 1e-30)
    return abs(a - b)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--collage", required=True)
    parser.add_argument("--mpirun", default="mpirun")
    parser.add_argument("--precision", required=True)
    parser.add_argument("--arch", default="gpt", choices=["gpt", "bert", "roberta"])
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--eval-interval", type=int, default=12, help="encoders only")
    parser.add_argument("--data-seed", type=int, default=1, help="encoders only: the corpus")
    parser.add_argument("--layouts", default="tp2,dp2,dp2-zero,tp2xdp2")
    parser.add_argument("--positions", default="learned", help="gpt only")
    parser.add_argument("--tied", default="true", help="gpt only")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a config override for every run (repeatable)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    extra = [x for o in args.set for x in ("--set", o)]
    encoder = args.arch != "gpt"
    checks = ENCODER_CHECKS if encoder else GPT_CHECKS

    work = tempfile.mkdtemp(prefix="collage_equivalence_")
    try:
        began = time.time()
        config = os.path.join(work, "tiny.yaml")
        if encoder:
            text, valid_rows = write_encoder_data(work, args)
        else:
            write_dataset(os.path.join(work, "tokens"))
            text = CONFIG.format(data=os.path.join(work, "tokens"), steps=args.steps,
                                 precision=args.precision, backend=args.backend,
                                 positions=args.positions, tied=args.tied)
        with open(config, "w") as f:
            f.write(text)
        single_dir = os.path.join(work, "single")
        run([args.collage, "train", config, "--set", "logging.dir=" + single_dir] + extra,
            "single process")
        reference = metrics(single_dir)
        failures = []
        runs = {}
        for name in args.layouts.split(","):
            ranks, overrides = LAYOUTS[name]
            run_dir = os.path.join(work, name)
            cmd = [args.mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks),
                   "-x", "OPENBLAS_NUM_THREADS=1", args.collage, "train", config,
                   "--set", "logging.dir=" + run_dir] + extra
            for o in overrides:
                cmd += ["--set", o]
            run(cmd, name)
            records = metrics(run_dir)
            runs[name] = records
            if len(records) != len(reference):
                failures.append("%s: %d records, single process %d" %
                                (name, len(records), len(reference)))
                continue
            worst = dict.fromkeys(checks, 0.0)
            for a, b in zip(reference, records):
                step_failures = []
                for key, (kind, tolerance) in checks.items():
                    if (key in a) != (key in b):
                        failures.append("%s step %d: %s logged by one run only" %
                                        (name, a["step"], key))
                        continue
                    if key not in a:
                        continue
                    d = difference(kind, a[key], b[key])
                    worst[key] = max(worst[key], d)
                    if not d <= tolerance:  # NaN fails too
                        step_failures.append("%s %.6g vs %.6g" % (key, b[key], a[key]))
                if step_failures:
                    failures.append("%s step %d: %s" % (name, a["step"], ", ".join(step_failures)))
                # Which parameters get a non-zero update is the same set in every layout: the
                # count catches a replicated tensor counted once per TP rank.
                if "updated" in a and (abs(a["updated"] - b.get("updated", -1)) >
                                       UPDATED_RELATIVE * a["updated"]):
                    failures.append("%s step %d: %s parameters updated, single process %d" %
                                    (name, a["step"], b.get("updated"), a["updated"]))
            if encoder:
                print("%-14s %s %s %s over %d steps: max difference %s" %
                      (name, args.arch, args.precision, args.backend, args.steps,
                       ", ".join("%s %.2e" % (k, v) for k, v in worst.items()
                                 if any(k in r for r in reference))))
            else:
                print("%-14s %s %s over %d steps: max relative loss difference %.2e, grad norm "
                      "%.2e, edq %.2e, val_loss %.2e; edq_ratio absolute %.2e" %
                      (name, args.precision, args.backend, args.steps, worst["loss"],
                       worst["grad_norm"], worst["edq"], worst["val_loss"], worst["edq_ratio"]))
        # Every GPT and encoder run: ZeRO-1 against plain DP at the same layout, exactly.
        for plain, zero in ZERO_PAIRS:
            if plain in runs and zero in runs:
                label = "%s vs %s" % (zero, plain)
                failures += [label + ": " + f
                             for f in exact_differences(runs[plain], runs[zero], label)]
        if encoder:
            fewest, most = mlm_label_counts(valid_rows, dynamic=args.arch == "roberta")
            counts = {"val_mlm_accuracy": (fewest, most),
                      "val_nsp_accuracy": (len(valid_rows), len(valid_rows))}
            failures += compare_accuracies(reference, runs, counts)
            failures += encoder_learned(reference)
            validations = sum(1 for r in reference if "val_loss" in r)
            if validations < 2:
                failures.append("the single process validated %d time(s): nothing to compare" %
                                validations)
        else:
            last, first = reference[-1]["loss"], reference[1]["loss"]
            if not last < first - 0.5:
                failures.append("the single-process loss did not fall (%.3f -> %.3f): nothing "
                                "was compared" % (first, last))
        if failures:
            sys.exit("FAIL\n" + "\n".join(failures))
        print("OK (%.1f s)" % (time.time() - began))
    finally:
        if args.keep:
            print("work directory:", work)
        else:
            shutil.rmtree(work, ignore_errors=True)


def compare_accuracies(reference, runs, counts):
    """Every layout's validation accuracies within one prediction of the single process's.
    counts[key] = (fewest, most) predictions a validation scores: the accuracies are all
    right / N for one N in that range (the same rows and masks every validation), which must
    make every logged accuracy a whole count."""
    failures = []
    for key, (fewest, most) in counts.items():
        values = [r[key] for records in [reference] + list(runs.values()) for r in records
                  if key in r]
        if not values:
            continue
        candidates = [n for n in range(max(fewest, 1), most + 1)
                      if all(abs(v * n - round(v * n)) < 1e-6 for v in values)]
        if not candidates:
            failures.append("%s: no count of predictions in [%d, %d] gives the accuracies %s" %
                            (key, fewest, most, sorted(set(values))))
            continue
        # The fewest: if N is really larger (but < 2 × fewest, checked), one differing
        # prediction still counts as less than two.
        n = candidates[0]
        if most >= 2 * fewest:
            failures.append("%s: between %d and %d predictions: too uncertain to count flips" %
                            (key, fewest, most))
        worst = {}
        for name, records in runs.items():
            worst[name] = 0.0
            for a, b in zip(reference, records):
                if key not in a or key not in b:
                    continue
                flips = abs(a[key] - b[key]) * n
                worst[name] = max(worst[name], flips)
                if not flips < 1.5:
                    failures.append("%s step %d: %s %.6f vs %.6f: %.0f of %d predictions differ" %
                                    (name, a["step"], key, b[key], a[key], flips, n))
        print("%s (%d predictions; single process %s): predictions differing at most: %s" %
              (key, n, " ".join("%.3f" % r[key] for r in reference if key in r),
               ", ".join("%s %.0f" % (k, v) for k, v in worst.items())))
    return failures


def exact_differences(a_records, b_records, label):
    """The keys of EXACT_KEYS equal, those of DOUBLE_KEYS within 1e-12, on every step; prints
    what was compared and the double keys' largest difference."""
    failures = []
    compared, worst = set(), 0.0
    for a, b in zip(a_records, b_records):
        for key in EXACT_KEYS + DOUBLE_KEYS:
            x, y = a.get(key), b.get(key)
            if x is not None and y is not None:
                compared.add(key)
                if key in DOUBLE_KEYS and x != y:
                    worst = max(worst, abs(x - y) / max(abs(x), abs(y)))
            if x == y or (key in DOUBLE_KEYS and x is not None and y is not None and
                          abs(x - y) <= 1e-12 * abs(x)):
                continue
            failures.append("step %d %s %r vs %r" % (a["step"], key, y, x))
    # Nothing compared is no check: the loss and the updated count are on every step.
    failures += ["%s never logged" % key for key in ("loss", "updated") if key not in compared]
    print("%s: %s %s; %s at most %.1e apart (relative)" %
          (label, ", ".join(k for k in EXACT_KEYS if k in compared),
           "%d differences" % len(failures) if failures else "equal on every step",
           ", ".join(k for k in DOUBLE_KEYS if k in compared), worst))
    return failures


# How far the single process's MLM loss must fall (nats) for the comparison to mean something:
# a fresh model is at ln 159 = 5.07, the words' frequencies at ≈ 3.5 (measured falls 1.3-1.8 in
# training, 1.0-1.8 in validation over corpus seeds 1..7); a model that learns nothing (measured
# with lr 1e-6) stays within 0.05 of where it started.
MLM_LOSS_FALL = 0.8


def encoder_learned(reference):
    """The comparison means something only if the model learned: the MLM loss must fall, in
    training (means of the first and last 4 steps: one step's ~35 labels are noisy) and in
    validation (step 0, the fresh model, against the last)."""
    failures = []
    train = [r["mlm_loss"] for r in reference if "mlm_loss" in r]
    first, last = sum(train[:4]) / 4, sum(train[-4:]) / 4
    if not last < first - MLM_LOSS_FALL:
        failures.append("the single-process MLM loss did not fall (mean of the first 4 steps "
                        "%.3f, of the last 4 %.3f): nothing was compared" % (first, last))
    val = [r["val_mlm_loss"] for r in reference if "val_mlm_loss" in r]
    if not (len(val) >= 2 and val[-1] < val[0] - MLM_LOSS_FALL):
        failures.append("the single-process validation MLM loss did not fall (%s)" %
                        " -> ".join("%.3f" % v for v in val))
    print("single process: MLM loss %.3f -> %.3f (training, means of 4 steps), %s (validation)" %
          (first, last, " -> ".join("%.3f" % v for v in val)))
    return failures


if __name__ == "__main__":
    main()
