#!/usr/bin/env python3
"""Checkpoints, memory and communication under parallelism (docs/PARALLEL.md §5, §7).

1. What a TP=2 x DP=2 ZeRO-1 run allocates and communicates is what `collage plan` says: the
   memory table rank 0 logs equals plan's, row for row, and the step line's TP/DP traffic
   equals plan's communication per step.
2. Resuming the checkpoint set at the same layout continues bit for bit (every metric of
   every later step equal).
3. Resuming it at other layouts (one process, TP=2, DP=2, TP=2 x DP=2 without ZeRO) converts
   it, and the loss continues within the tolerance of the layouts' equivalence
   (equivalence.py).
4. A rank killed in the middle of saving (COLLAGE_TEST_KILL_IN_SAVE: a shard rank before the
   set is committed, or rank 0 before the manifest) never leaves a newest checkpoint that
   loads: `--resume latest` continues from the previous set.

Usage: checkpoints.py --collage BIN [--mpirun MPIRUN]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from equivalence import LOSS_RELATIVE, write_dataset  # noqa: E402

CONFIG = """
model: {{n_layer: 2, hidden_size: 64, n_head: 4, vocab_size: 64, max_position_embeddings: 32,
        position_embedding: rope, tie_embeddings: false}}
data: {{datasets: ["{data}"], seq_len: 16, split: "90,5,5"}}
training: {{micro_batch_size: 2, global_batch_size: 8, max_steps: 8, eval_interval: 0,
           log_interval: 1}}
optimizer: {{precision: collage-plus, lr: 3.0e-3, min_lr: 3.0e-4, warmup_steps: 2,
            decay_steps: 8}}
parallel: {{backend: cpu, threads: 1}}
logging: {{progress: "off"}}
checkpoint: {{interval: 4, keep: 3}}
"""

failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
    return condition


class Runner:
    def __init__(self, args, work):
        self.args, self.work = args, work
        self.config = os.path.join(work, "tiny.yaml")

    def train(self, run, ranks, overrides=(), resume=None, env=None, expect_ok=True):
        cmd = []
        if ranks > 0:
            cmd = [self.args.mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks),
                   "-x", "OPENBLAS_NUM_THREADS=1"]
            for name in (env or {}):
                cmd += ["-x", name]
        cmd += [self.args.collage, "train", self.config, "--set",
                "logging.dir=" + os.path.join(self.work, run)]
        for o in overrides:
            cmd += ["--set", o]
        if resume:
            cmd += ["--resume", resume]
        full_env = dict(os.environ, OPENBLAS_NUM_THREADS="1", **(env or {}))
        result = subprocess.run(cmd, env=full_env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, timeout=600)
        if expect_ok and result.returncode != 0:
            sys.exit("FAIL: %s exited %d\n%s" % (" ".join(cmd), result.returncode,
                                                  result.stdout[-4000:]))
        return result

    def metrics(self, run):
        with open(os.path.join(self.work, run, "metrics.jsonl")) as f:
            records = [json.loads(line) for line in f if line.strip()]
        by_step = {r["step"]: r for r in records}
        check(len(by_step) == len(records), "%s: a step appears twice in metrics.jsonl" % run)
        return by_step


def memory_rows(text):
    """The memory table's rows (label -> size) from a train log or plan output."""
    rows = {}
    for line in text.splitlines():
        m = re.match(r"^(?:\[[0-9:]+\] )?\s{2,}(\S.*?)\s{2,}([0-9.]+ [KMG]?B)\b", line)
        if m and not m.group(1).endswith(" group"):  # plan's communication rows follow
            rows[m.group(1)] = m.group(2)
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--collage", required=True)
    parser.add_argument("--mpirun", default="mpirun")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="collage_parallel_checkpoints_")
    try:
        write_dataset(os.path.join(work, "tokens"))
        r = Runner(args, work)
        with open(r.config, "w") as f:
            f.write(CONFIG.format(data=os.path.join(work, "tokens")))
        layout = ["parallel.tensor_parallel=2", "parallel.zero=1"]

        # 1. straight run at TP=2 x DP=2, ZeRO-1; its memory and traffic against plan
        r.train("straight", 4, layout + ["logging.all_ranks=true"])
        with open(os.path.join(work, "straight", "train.log")) as f:
            log = f.read()
        # Rank 0 logs and writes the metrics, once per step; the others their own logs.
        check(sorted(r.metrics("straight")) == list(range(9)),
              "metrics.jsonl of a 4-rank run does not hold steps 0..8 once each")
        for rank in (1, 2, 3):
            path = os.path.join(work, "straight", "rank_%d.log" % rank)
            check(os.path.exists(path) and "[rank %d]" % rank in open(path).read(),
                  "logging.all_ranks: no %s" % path)
        plan = subprocess.run([args.collage, "plan", r.config, "--tensor-parallel", "2",
                               "--data-parallel", "2", "--set", "parallel.zero=1"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        check(plan.returncode == 0, "collage plan failed:\n" + plan.stdout)
        logged, planned = memory_rows(log), memory_rows(plan.stdout)
        check(len(logged) >= 8 and logged == planned,
              "memory table of the run %s differs from plan's %s" % (logged, planned))
        m = re.search(r"tensor-parallel group\s+(\S+ \S+)\s.*\n.*data-parallel group\s+(\S+ \S+)",
                      plan.stdout)
        step_line = re.search(r"step\s+3/8 .*\| comm TP (\S+ \S+) DP (\S+ \S+)", log)
        if check(m and step_line, "no communication figures in plan or the step line"):
            check(m.groups() == step_line.groups(),
                  "step traffic TP %s DP %s, plan says TP %s DP %s" %
                  (step_line.group(1), step_line.group(2), m.group(1), m.group(2)))
        straight = r.metrics("straight")
        set4 = os.path.join(work, "straight", "checkpoints", "step_00000004.ckpt")
        check(os.path.isdir(os.path.join(work, "straight", "checkpoints", "step_00000004.shards")),
              "no shard directory for step 4")

        # 2. resume at the same layout: bit for bit
        shutil.copytree(os.path.join(work, "straight"), os.path.join(work, "same"))
        r.train("same", 4, layout, resume=os.path.join(work, "same", "checkpoints",
                                                        "step_00000004.ckpt"))
        same = r.metrics("same")
        for step in range(5, 9):
            for key in ("loss", "grad_norm", "edq", "edq_ratio", "edq_ratio_cumulative", "lr"):
                check(same[step][key] == straight[step][key],
                      "same-layout resume: step %d %s %r != %r" %
                      (step, key, same[step][key], straight[step][key]))

        # 3. resume at other layouts
        others = {"single": (0, ["parallel.tensor_parallel=1"]),
                  "tp2": (2, ["parallel.tensor_parallel=2"]),
                  "dp2-zero": (2, ["parallel.tensor_parallel=1", "parallel.zero=1"]),
                  "tp2xdp2": (4, ["parallel.tensor_parallel=2"])}
        for name, (ranks, overrides) in others.items():
            r.train(name, ranks, overrides, resume=set4)
            got = r.metrics(name)
            worst = 0.0
            for step in range(5, 9):
                diff = abs(got[step]["loss"] - straight[step]["loss"]) / straight[step]["loss"]
                worst = max(worst, diff)
                check(diff <= LOSS_RELATIVE, "resumed at %s: step %d loss %.6f vs %.6f" %
                      (name, step, got[step]["loss"], straight[step]["loss"]))
            print("resumed at %-9s steps 5-8: max relative loss difference %.2e" % (name, worst))
        # and the single-process checkpoint of that run resumes at TP=2 x DP=2
        single8 = os.path.join(work, "single", "checkpoints", "step_00000008.ckpt")
        r.train("back", 4, layout + ["training.max_steps=10", "optimizer.decay_steps=10"],
                resume=single8)
        check(10 in r.metrics("back"), "a single-process checkpoint did not resume at TP=2 x DP=2")

        # 4. killed while saving step 8: the newest loadable set stays step 4
        for victim in ("1", "0"):
            run = "killed" + victim
            shutil.copytree(os.path.join(work, "straight"), os.path.join(work, run))
            ckdir = os.path.join(work, run, "checkpoints")
            for name in os.listdir(ckdir):
                if "00000008" in name:
                    shutil.rmtree(os.path.join(ckdir, name), ignore_errors=True)
                    if os.path.exists(os.path.join(ckdir, name)):
                        os.remove(os.path.join(ckdir, name))
            with open(os.path.join(ckdir, "latest"), "w") as f:
                f.write("step_00000004.ckpt\n")
            result = r.train(run, 4, layout, resume="latest",
                             env={"COLLAGE_TEST_KILL_IN_SAVE": victim}, expect_ok=False)
            check(result.returncode != 0, "rank %s was not killed while saving" % victim)
            check(not os.path.exists(os.path.join(ckdir, "step_00000008.ckpt")),
                  "a killed save (rank %s) left step_00000008.ckpt" % victim)
            resumed = r.train(run, 4, layout, resume="latest")
            check("resumed from %s" % os.path.join(ckdir, "step_00000004.ckpt") in resumed.stdout,
                  "after rank %s died while saving, --resume latest did not take step 4:\n%s" %
                  (victim, resumed.stdout[-2000:]))
            check(r.metrics(run)[8]["loss"] == straight[8]["loss"],
                  "after rank %s died while saving, the rerun differs" % victim)
        if failures:
            sys.exit("FAIL\n" + "\n".join(failures))
        print("OK")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
