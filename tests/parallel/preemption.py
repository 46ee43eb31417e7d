#!/usr/bin/env python3
"""Preemption (src/train/stop_signal.h): a signal stops `collage train` cleanly and the run
resumes bit for bit.

Cases:
  single   one process gets SIGTERM while training: it finishes the step, writes a checkpoint,
           logs why (with date, time and level) and exits with status 75; `--resume` then
           continues to the same losses and gradient norms, bit for bit, as a run that was
           never stopped.
  ranks    `mpirun -np 2` (data-parallel 2): SIGUSR1 reaches rank 1 only; both ranks stop after
           the same step, one checkpoint set is written, the job exits 75, and resuming under
           mpirun matches the uninterrupted run.
  sigint2  a second SIGINT during the stop aborts at once, without a checkpoint.
  launcher a scheduler's SIGTERM to the launcher (scripts/launch/stop-signals.sh running mpirun
           -np 2), with steps of 3 s (COLLAGE_TEST_STEP_SECONDS): every rank finishes its step,
           one checkpoint set is written and the job exits 75. SIGTERM to mpirun itself would
           have Open MPI kill the ranks a second or two later, mid-step, with no checkpoint and
           exit 1 (measured: that is what this case catches when the launcher is left out).

Usage: preemption.py --collage BIN [--mpirun MPIRUN] [--cases single,ranks,sigint2,launcher]
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dead_rank import rank_pids  # noqa: E402
from equivalence import write_dataset  # noqa: E402

# Every run of a case has the same max_steps: Megatron's sample index, and so the data order,
# depends on the samples the run asks for. Signals stop every run long before its end: the
# first after step 5, the resumed and the straight ones once they are past step COMPARED.
CONFIG = """
model: {{n_layer: 2, hidden_size: {hidden}, n_head: 4, vocab_size: 64, max_position_embeddings: 32}}
data: {{datasets: ["{data}"], seq_len: 16, split: "90,5,5"}}
training: {{micro_batch_size: 2, global_batch_size: 8, max_steps: {steps}, eval_interval: 0,
           log_interval: 1}}
optimizer: {{precision: collage-plus, warmup_steps: 2, decay_steps: 1000}}
parallel: {{backend: cpu, threads: 1}}
logging: {{progress: "off"}}
checkpoint: {{interval: 0}}
"""

EXIT_STOPPED = 75
STEPS = 600
COMPARED = 40
ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")


def metrics(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def wait_for_steps(run_dir, steps, job, timeout=120):
    """Until metrics.jsonl has `steps` step records (or the job ends)."""
    deadline = time.time() + timeout
    path = os.path.join(run_dir, "metrics.jsonl")
    while time.time() < deadline and job.poll() is None:
        if os.path.exists(path):
            with open(path) as f:
                if sum(1 for line in f if '"loss"' in line) >= steps:
                    return True
        time.sleep(0.05)
    return False


def compare(stopped, straight, last_step):
    """The stopped-and-resumed run's records equal the straight run's, bit for bit."""
    a = {r["step"]: r for r in stopped if "loss" in r}
    b = {r["step"]: r for r in straight if "loss" in r}
    failures = []
    for step in range(1, last_step + 1):
        if step not in a or step not in b:
            failures.append("step %d missing (stopped run %s, straight run %s)" %
                            (step, step in a, step in b))
            continue
        for key in ("loss", "grad_norm", "edq", "consumed_samples", "tokens"):
            if a[step][key] != b[step][key]:
                failures.append("step %d %s: %r after resuming, %r straight" %
                                (step, key, a[step][key], b[step][key]))
    return failures


def launch(cmd, ranks):
    if ranks > 1:
        cmd = [ARGS.mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks), "-x",
               "OPENBLAS_NUM_THREADS=1"] + cmd
    return cmd


def train_until(cmd, run_dir, ranks, sig, steps):
    """Runs `cmd` (collage train ...) until metrics.jsonl holds `steps` step records, then sends
    `sig` to it (to rank 1 only under mpirun: the others must follow). Returns (exit status,
    output), or a failure message."""
    job = subprocess.Popen(launch(cmd, ranks), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, env=ENV, start_new_session=True)
    try:
        if not wait_for_steps(run_dir, steps, job, timeout=300):
            return "the job did not train to step %d: %s" % (
                steps, job.communicate(timeout=60)[0][-3000:])
        if ranks > 1:
            pids = rank_pids("logging.dir=" + run_dir)
            if 1 not in pids:
                return "no process of rank 1 among %s" % pids
            os.kill(pids[1], sig)
        else:
            os.kill(job.pid, sig)
        output = job.communicate(timeout=120)[0]
        return job.returncode, output
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)


def stop_and_resume(work, ranks, sig):
    config = os.path.join(work, "job.yaml")
    run_dir = os.path.join(work, "stopped%d" % ranks)
    train = [ARGS.collage, "train", config, "--set", "logging.dir=" + run_dir]
    stopped = train_until(train, run_dir, ranks, sig, 5)
    if isinstance(stopped, str):
        return [stopped]
    status, output = stopped
    failures = []
    if status != EXIT_STOPPED:
        failures.append("exit status %d, expected %d:\n%s" % (status, EXIT_STOPPED,
                                                               output[-3000:]))
    with open(os.path.join(run_dir, "train.log")) as f:
        log = f.read()
    name = signal.Signals(sig).name
    found = re.search(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \[warning\] %s received: stopped "
                      r"after step (\d+) with checkpoint (\S+);" % name, log, re.M)
    if not found:
        return failures + ["train.log has no dated '%s received: stopped after step' line:\n%s" %
                           (name, log[-2000:])]
    stopped_at = int(found.group(1))
    if not os.path.exists(found.group(2)):
        failures.append("the checkpoint %s is missing" % found.group(2))
    records = metrics(run_dir)
    if records[-1]["step"] != stopped_at:
        failures.append("metrics.jsonl ends at step %d, the stop was after step %d" %
                        (records[-1]["step"], stopped_at))
    # Resume, and compare with a run that was never stopped, over COMPARED steps: both are
    # stopped the same way once they are past it (max_steps, and so the data order, stays).
    resumed = train_until(train + ["--resume"], run_dir, ranks, sig, COMPARED)
    straight_dir = os.path.join(work, "straight%d" % ranks)
    straight = train_until([ARGS.collage, "train", config, "--set", "logging.dir=" + straight_dir],
                           straight_dir, ranks, sig, COMPARED)
    for what, run in (("resume", resumed), ("straight run", straight)):
        if isinstance(run, str) or run[0] != EXIT_STOPPED:
            return failures + ["%s failed: %s" % (what, run if isinstance(run, str) else
                                                   "exit %d\n%s" % (run[0], run[1][-3000:]))]
    failures += compare(metrics(run_dir), metrics(straight_dir), COMPARED)
    print("%d rank(s), %s: stopped after step %d, resumed: steps 1-%d %s" %
          (ranks, name, stopped_at, COMPARED, "identical" if not failures else "DIFFERENT"))
    return failures


def second_sigint(work):
    # Slower steps (hidden 256), so that the second SIGINT lands while the first stop is underway.
    config = os.path.join(work, "slow.yaml")
    run_dir = os.path.join(work, "sigint2")
    job = subprocess.Popen([ARGS.collage, "train", config, "--set", "logging.dir=" + run_dir],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV,
                           start_new_session=True)
    try:
        if not wait_for_steps(run_dir, 2, job):
            return ["the job did not train"]
        os.kill(job.pid, signal.SIGINT)
        time.sleep(0.01)
        os.kill(job.pid, signal.SIGINT)
        output = job.communicate(timeout=60)[0]
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    failures = []
    if job.returncode != -signal.SIGINT:
        failures.append("exit status %d, expected death by SIGINT:\n%s" % (job.returncode,
                                                                          output[-2000:]))
    if "second SIGINT: aborting without a checkpoint" not in output:
        failures.append("no 'second SIGINT' message:\n" + output[-2000:])
    if os.path.isdir(os.path.join(run_dir, "checkpoints")) and any(
            name.endswith(".ckpt") for name in os.listdir(os.path.join(run_dir, "checkpoints"))):
        failures.append("a checkpoint was written")
    print("second SIGINT: %s" % ("aborted at once" if not failures else "FAILED"))
    return failures


def launcher_stop(work):
    """SIGTERM to scripts/launch/stop-signals.sh running mpirun: exit 75 with a checkpoint."""
    run_dir = os.path.join(work, "launcher")
    stop_signals = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "scripts", "launch", "stop-signals.sh")
    step_seconds = 3
    cmd = [stop_signals, ARGS.mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", "-x",
           "OPENBLAS_NUM_THREADS=1", "-x", "COLLAGE_TEST_STEP_SECONDS=%d" % step_seconds,
           ARGS.collage, "train", os.path.join(work, "job.yaml"), "--set",
           "logging.dir=" + run_dir]
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env=ENV, start_new_session=True)
    try:
        if not wait_for_steps(run_dir, 1, job, timeout=120):
            return ["launcher: the job did not train: " + job.communicate(timeout=60)[0][-3000:]]
        signalled = time.time()
        steps_at_signal = len([r for r in metrics(run_dir) if "loss" in r])
        os.kill(job.pid, signal.SIGTERM)
        output = job.communicate(timeout=120)[0]
        took = time.time() - signalled
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    failures = []
    if job.returncode != EXIT_STOPPED:
        failures.append("launcher: exit status %d, expected %d:\n%s" % (
            job.returncode, EXIT_STOPPED, output[-3000:]))
    with open(os.path.join(run_dir, "train.log")) as f:
        log = f.read()
    found = re.search(r"SIGUSR1 received: stopped after step (\d+) with checkpoint (\S+);", log)
    if not found:
        return failures + ["launcher: train.log has no 'SIGUSR1 received: stopped after step' "
                           "line:\n" + log[-2000:] + output[-2000:]]
    stopped_at = int(found.group(1))
    if not os.path.exists(found.group(2)):
        failures.append("launcher: the checkpoint %s is missing" % found.group(2))
    # The step under way when the signal came, or the one after if it came as a step ended.
    if not steps_at_signal <= stopped_at <= steps_at_signal + 2:
        failures.append("launcher: stopped after step %d, the signal came during step %d" %
                        (stopped_at, steps_at_signal + 1))
    print("launcher: SIGTERM during step %d of %d s: stopped after step %d with a checkpoint, "
          "exit %d, %.1f s after the signal" % (steps_at_signal + 1, step_seconds, stopped_at,
                                                job.returncode, took))
    return failures


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--collage", required=True)
    parser.add_argument("--mpirun", default="mpirun")
    parser.add_argument("--cases", default="single,ranks,sigint2,launcher")
    ARGS = parser.parse_args()
    work = tempfile.mkdtemp(prefix="collage_preemption_")
    try:
        write_dataset(os.path.join(work, "tokens"))
        for name, hidden in (("job.yaml", 64), ("slow.yaml", 512)):
            with open(os.path.join(work, name), "w") as f:
                f.write(CONFIG.format(data=os.path.join(work, "tokens"), hidden=hidden,
                                      steps=STEPS))
        failures = []
        cases = ARGS.cases.split(",")
        if "single" in cases:
            failures += stop_and_resume(work, 1, signal.SIGTERM)
        if "ranks" in cases:
            failures += stop_and_resume(work, 2, signal.SIGUSR1)
        if "sigint2" in cases:
            failures += second_sigint(work)
        if "launcher" in cases:
            failures += launcher_stop(work)
        if failures:
            sys.exit("FAIL\n" + "\n".join(failures))
        print("OK")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
