#!/usr/bin/env python3
"""A rank of a running `collage train` job that dies or stalls ends the whole job within 60 s,
with a message naming the rank, never a hang (docs/PARALLEL.md §6).

Starts a 4-rank TP=2 x DP=2 training that would run for minutes, waits until it trains, then
either kills one rank with SIGKILL (mpirun reports the rank and ends the job) or stops it with
SIGSTOP (the heartbeat watchdog, parallel.comm_timeout = 5 s, names it and ends the job).

Usage: dead_rank.py --collage BIN [--mpirun MPIRUN]
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from equivalence import write_dataset  # noqa: E402

CONFIG = """
model: {{n_layer: 2, hidden_size: 64, n_head: 4, vocab_size: 64, max_position_embeddings: 32}}
data: {{datasets: ["{data}"], seq_len: 16, split: "90,5,5"}}
training: {{micro_batch_size: 2, global_batch_size: 8, max_steps: 100000, eval_interval: 0,
           log_interval: 1}}
optimizer: {{precision: collage-plus, warmup_steps: 2, decay_steps: 100000}}
parallel: {{backend: cpu, threads: 1, tensor_parallel: 2, comm_timeout: 5}}
logging: {{progress: "off"}}
checkpoint: {{interval: 0}}
"""


def rank_pids(marker):
    """world rank -> pid of the collage ranks whose command line holds `marker` (the job's own
    logging.dir: other jobs on the machine, such as a parallel ctest, are never touched)."""
    pids = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % pid, "rb") as f:
                env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if (b"collage" in cmdline and b"OMPI_COMM_WORLD_RANK" in env and b"train" in cmdline
                and marker.encode() in cmdline):
            pids[int(env[b"OMPI_COMM_WORLD_RANK"])] = int(pid)
    return pids


def run_case(args, work, how, victim):
    log_dir = os.path.join(work, "%s%d" % (how, victim))
    cmd = [args.mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "4", "-x",
           "OPENBLAS_NUM_THREADS=1", args.collage, "train", os.path.join(work, "job.yaml"),
           "--set", "logging.dir=" + log_dir]
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env=dict(os.environ, OPENBLAS_NUM_THREADS="1"),
                           start_new_session=True)
    output = []
    try:
        # Wait for training to run (a few step lines), then hit the victim.
        deadline = time.time() + 120
        steps = 0
        while steps < 3 and time.time() < deadline:
            line = job.stdout.readline()
            if not line:
                break
            output.append(line)
            steps += bool(re.search(r"step\s+\d+/", line))
        if steps < 3:
            return "FAIL %s rank %d: the job did not train:\n%s" % (how, victim, "".join(output))
        pids = rank_pids("logging.dir=" + log_dir)
        if victim not in pids:
            return "FAIL: no process of rank %d among %s" % (victim, pids)
        hit = time.time()
        os.kill(pids[victim], signal.SIGKILL if how == "kill" else signal.SIGSTOP)
        try:
            rest, _ = job.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            return "FAIL %s rank %d: the job still runs 60 s later (a hang)" % (how, victim)
        took = time.time() - hit
        output.append(rest)
        text = "".join(output)
        named = (re.search(r"rank %d \(of 4" % victim, text) or
                 re.search(r"process rank %d with PID" % victim, text))
        if job.returncode == 0:
            return "FAIL %s rank %d: the job exited 0" % (how, victim)
        if not named:
            return "FAIL %s rank %d: no message names the rank:\n%s" % (how, victim, text[-3000:])
        print("%s rank %d: the job ended %.1f s later with status %d: %s" %
              (how, victim, took, job.returncode, named.group(0)))
        return None
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
        for pid in rank_pids("logging.dir=" + log_dir).values():  # stopped leftovers, if any
            os.kill(pid, signal.SIGKILL)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--collage", required=True)
    parser.add_argument("--mpirun", default="mpirun")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="collage_dead_rank_")
    try:
        write_dataset(os.path.join(work, "tokens"))
        with open(os.path.join(work, "job.yaml"), "w") as f:
            f.write(CONFIG.format(data=os.path.join(work, "tokens")))
        failures = [f for f in (run_case(args, work, "kill", 2), run_case(args, work, "stop", 1),
                                run_case(args, work, "stop", 0)) if f]
        if failures:
            sys.exit("\n".join(failures))
        print("OK")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
