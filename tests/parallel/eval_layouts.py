#!/usr/bin/env python3
"""`collage eval` under mpirun (src/tools/evaluate.h).

A tiny GPT trained as one process and one trained at tensor-parallel 2 (a checkpoint set) are
evaluated at every layout:
1. at the layout they were trained at, eval prints exactly the val_loss training logged at the
   checkpoint's step (the same computation; under mpirun every rank takes part, rank 0 prints);
2. at data-parallel 2 the validation batches are split over the replicas: the same up to the
   order of a double sum;
3. at other tensor-parallel layouts (the checkpoint cut anew): within the layouts' equivalence
   tolerance (equivalence.py);
4. a missing checkpoint ends the job with an error naming it on every layout.

Usage: eval_layouts.py --collage BIN [--mpirun MPIRUN]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from equivalence import LOSS_RELATIVE, write_dataset  # noqa: E402

CONFIG = """
model: {{n_layer: 2, hidden_size: 64, n_head: 4, vocab_size: 64, max_position_embeddings: 32}}
data: {{datasets: ["{data}"], seq_len: 16, split: "90,5,5"}}
training: {{micro_batch_size: 2, global_batch_size: 8, max_steps: 4, eval_interval: 4,
           eval_iters: 4, log_interval: 1}}
optimizer: {{precision: collage-plus, lr: 3.0e-3, min_lr: 3.0e-4, warmup_steps: 2,
            decay_steps: 4}}
parallel: {{backend: cpu, threads: 1}}
logging: {{progress: "off"}}
checkpoint: {{interval: 4, keep: 2}}
"""

failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
    return condition


def run(args, command, ranks, overrides, expect_ok=True):
    cmd = []
    if ranks > 0:
        cmd = [args.mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks), "-x",
               "OPENBLAS_NUM_THREADS=1"]
    cmd += [args.collage] + command
    for o in overrides:
        cmd += ["--set", o]
    result = subprocess.run(cmd, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            timeout=300)
    if expect_ok and result.returncode != 0:
        sys.exit("FAIL: %s exited %d\n%s\n%s" % (" ".join(cmd), result.returncode,
                                                  result.stdout[-2000:], result.stderr[-4000:]))
    return result


def logged_val_loss(work, name, step):
    with open(os.path.join(work, name, "metrics.jsonl")) as f:
        for line in f:
            record = json.loads(line)
            if record["step"] == step:
                return record["val_loss"]
    sys.exit("FAIL: %s logged no step %d" % (name, step))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--collage", required=True)
    parser.add_argument("--mpirun", default="mpirun")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="collage_eval_layouts_")
    try:
        write_dataset(os.path.join(work, "tokens"))
        config = os.path.join(work, "tiny.yaml")
        with open(config, "w") as f:
            f.write(CONFIG.format(data=os.path.join(work, "tokens")))
        tp2 = ["parallel.tensor_parallel=2"]
        run(args, ["train", config], 0, ["logging.dir=" + os.path.join(work, "single")])
        run(args, ["train", config], 2, tp2 + ["logging.dir=" + os.path.join(work, "tp2")])

        layouts = {  # name: (ranks, overrides, tensor-parallel size)
            "single process": (0, [], 1),
            "DP=2": (2, [], 1),
            "TP=2": (2, tp2, 2),
            "TP=2 x DP=2": (4, tp2, 2),
        }
        for trained, trained_layout in (("single", "single process"), ("tp2", "TP=2")):
            logged = logged_val_loss(work, trained, 4)
            checkpoint = os.path.join(work, trained, "checkpoints", "step_00000004.ckpt")
            for name, (ranks, overrides, tp) in layouts.items():
                result = run(args, ["eval", config, "--checkpoint", checkpoint, "--json"], ranks,
                             overrides + ["logging.dir=" + os.path.join(work, "eval")])
                lines = [l for l in result.stdout.splitlines() if l.startswith("{")]
                if not check(len(lines) == 1, "%s checkpoint at %s: %d JSON lines (rank 0 alone "
                             "prints):\n%s" % (trained, name, len(lines), result.stdout)):
                    continue
                record = json.loads(lines[0])
                got = record["val_loss"]
                world = max(ranks, 1)
                check(record["world_size"] == world and record["step"] == 4,
                      "%s at %s: record %s" % (trained, name, record))
                relative = abs(got - logged) / logged
                if name == trained_layout:
                    ok = got == logged  # the same computation
                elif tp == layouts[trained_layout][2]:
                    ok = relative <= 1e-12  # the same model; only the batches' sum reordered
                else:
                    ok = relative <= LOSS_RELATIVE  # another tensor-parallel cut
                check(ok, "%s checkpoint (val_loss %r logged) evaluated at %s: %r (relative %.2g)"
                      % (trained, logged, name, got, relative))
                print("%-6s checkpoint at %-16s val_loss %.10f (logged %.10f, relative %.1e)" %
                      (trained, name, got, logged, relative))

        missing = os.path.join(work, "single", "checkpoints", "step_00000099.ckpt")
        for name, (ranks, overrides, _) in layouts.items():
            result = run(args, ["eval", config, "--checkpoint", missing], ranks,
                         overrides + ["logging.dir=" + os.path.join(work, "eval")],
                         expect_ok=False)
            check(result.returncode != 0 and missing + ": no such checkpoint file" in
                  result.stderr, "a missing checkpoint at %s: exit %d\n%s" %
                  (name, result.returncode, result.stderr[-2000:]))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print("OK: eval at every layout")


if __name__ == "__main__":
    main()
