#!/usr/bin/env python3
"""A rank of a running `collage train` job that dies or stalls ends the whole job within 60 s,
with a message naming the rank, never a hang (docs/PARALLEL.md §6).

Starts a 4-rank TP=2 x DP=2 training that would run for minutes, waits until it trains, then
either kills one rank with SIGKILL (mpirun reports the rank and ends the job) or stops it with
SIGSTOP (the heartbeat watchdog, parallel.comm_timeout = 5 s, names it and ends the job).

Last, mpirun itself is killed (kill -9): its ranks, which could still reach each other and went
on training and saving for seconds, must end within 0.5 s with no step after the one under way
(src/dist/launcher_watch.h), leaving the run's lock free for an immediate resume.

Usage: dead_rank.py --collage BIN [--mpirun MPIRUN]
"""
import argparse
import fcntl
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


def alive(pid):
    """Some thread of the process still runs. A zombie (an orphan init has not reaped yet) has
    ended; but its main thread turns zombie before the others have exited, and those still hold
    its files, and so its locks: every thread is looked at."""
    try:
        threads = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return False
    for thread in threads:
        try:
            with open("/proc/%d/task/%s/stat" % (pid, thread)) as f:
                if f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                    return True
        except OSError:
            pass
    return False


def step_count(log_dir):
    try:
        with open(os.path.join(log_dir, "metrics.jsonl")) as f:
            return sum(1 for line in f if '"loss"' in line)
    except OSError:
        return 0


def launcher_killed(args, work):
    log_dir = os.path.join(work, "mpirun-killed")
    cmd = [args.mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "4", "-x",
           "OPENBLAS_NUM_THREADS=1", args.collage, "train", os.path.join(work, "job.yaml"),
           "--set", "logging.dir=" + log_dir, "--set", "training.log_interval=1000000"]
    # (no step lines on the console: a rank writing to dead mpirun's pipe would die of SIGPIPE,
    # which is not what ends the ranks of another node, whose orted holds their pipes)
    job = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           env=dict(os.environ, OPENBLAS_NUM_THREADS="1"),
                           start_new_session=True)
    pids = {}
    try:
        deadline = time.time() + 120
        while step_count(log_dir) < 3 and time.time() < deadline and job.poll() is None:
            time.sleep(0.05)
        pids = rank_pids("logging.dir=" + log_dir)
        if step_count(log_dir) < 3 or len(pids) != 4:
            return "FAIL mpirun killed: the job did not train (ranks %s)" % pids
        os.kill(job.pid, signal.SIGKILL)
        hit = time.time()
        # Counted once mpirun is gone (reaped), not when the signal was sent: mpirun dies a few
        # ms after kill() returns, and a step of this small job can end in that time.
        job.wait()
        steps_at_death = step_count(log_dir)
        while any(alive(pid) for pid in pids.values()) and time.time() - hit < 10:
            time.sleep(0.01)
        took = time.time() - hit
        left = [rank for rank, pid in pids.items() if alive(pid)]
        if left:
            return "FAIL mpirun killed: ranks %s still run 10 s later" % left
        steps_after = step_count(log_dir) - steps_at_death
        # The step under way may finish; no other. The watch looks every 50 ms; 0.5 s leaves
        # room for a loaded machine. Without it Open MPI's ranks end on their own 1.05-1.1 s
        # after mpirun here (measured), 1.5-3 s elsewhere, some after more steps and checkpoints.
        if took > 0.5 or steps_after > 1:
            return ("FAIL mpirun killed: the ranks ended %.2f s after mpirun (at most 0.5 s) and "
                    "logged %d step(s) after it died (at most 1)" % (took, steps_after))
        with open(os.path.join(log_dir, "collage.lock")) as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return "FAIL mpirun killed: logging.dir is still locked after the ranks ended"
        print("mpirun killed: its 4 ranks ended %.2f s later, %d step(s) after its death, the "
              "run's lock free" % (took, steps_after))
        return None
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
        for pid in pids.values():
            if alive(pid):
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
                                run_case(args, work, "stop", 0), launcher_killed(args, work))
                    if f]
        if failures:
            sys.exit("\n".join(failures))
        print("OK")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
