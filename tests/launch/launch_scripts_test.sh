#!/usr/bin/env bash
# Tests of the cluster launch scripts in scripts/launch/, without a GPU, Slurm or a build:
#  - mpirun-p4d.sh --dry-run with a 2-node hostfile: rank count, hostfile slots, mapping and
#    binding options, the EFA/NCCL variables exported with -x (defaults, the caller's, overrides),
#    the config and collage arguments passed through; --auto-resume adding `--resume latest`
#    only when <checkpoint dir>/latest exists, and `--wait-lock 120`; the real-run path (a stub
#    mpirun); errors.
#  - slurm-p4d.sbatch run as a plain bash script with fake SLURM_* variables and a stub
#    scontrol: the same checks through it, its errors, USR1 (the time-limit warning) stopping
#    the launcher and then requeueing the job, and TERM stopping it without a requeue.
#  - stopping through the launcher (scripts/launch/stop-signals.sh): TERM, INT, HUP, USR1 or
#    USR2 to mpirun-p4d.sh reach a stub mpirun as SIGUSR1 and the exit status is mpirun's; a
#    second INT sends it SIGTERM.
#  - when mpirun is Open MPI: the placement mpirun itself computes from the launcher's command
#    (--do-not-launch): ranks 0-7 on the first node and 8-15 on the second, and on a synthetic
#    two-socket node (tests/launch/two-socket-topology.xml, made by hwloc's
#    `lstopo --input "package:2 [numa] core:4 pu:1" --of xml`) ranks 0-3 bound to socket 0 and
#    4-7 to socket 1, where p4d's GPUs 0-3 and 4-7 are attached.
#
#   bash tests/launch/launch_scripts_test.sh      prints "N passed, M failed"; exit 1 on failure
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
launcher=$repo/scripts/launch/mpirun-p4d.sh
sbatch_script=$repo/scripts/launch/slurm-p4d.sbatch
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export TMPDIR=$work
# The caller's NCCL/libfabric/OpenMP settings would be forwarded to the ranks: start clean.
for name in $(compgen -v | grep -E '^(NCCL_|FI_|OFI_NCCL_|OMP_|COLLAGE_|SLURM_)'); do unset "$name"; done
unset P4D_EFA_LIB_DIRS

passed=0 failed=0
pass() { passed=$((passed + 1)); }
fail() {
  failed=$((failed + 1))
  echo "FAIL: $1" >&2
  [[ -z ${2:-} ]] || printf '%s\n' "$2" | sed 's/^/    | /' >&2
}
# expect_in NAME TEXT NEEDLE / expect_not_in NAME TEXT NEEDLE
expect_in() { if [[ $2 == *"$3"* ]]; then pass; else fail "$1: no '$3' in" "$2"; fi; }
expect_not_in() { if [[ $2 != *"$3"* ]]; then pass; else fail "$1: '$3' should not be in" "$2"; fi; }
expect_eq() { if [[ $2 == "$3" ]]; then pass; else fail "$1: got '$2', expected '$3'"; fi; }
# The mpirun command: the last line of a dry run.
command_of() { tail -n 1 <<<"$1"; }
np_of() { sed -n 's/.* -np \([0-9]*\) .*/\1/p' <<<"$(command_of "$1")"; }

# ---- fixtures: a project directory (configs, runs), a stub collage and mpirun, hostfiles
project=$work/project
mkdir -p "$project/configs" "$work/bin" "$work/efa/lib"
cd "$project" || exit 1
cat >configs/gpt.yaml <<'EOF'
model:
  n_layer: 2
logging:
  level: info
  dir: "runs/test"   # quoted, with a comment
parallel:
  tensor_parallel: 1
EOF
cat >configs/with-checkpoint-dir.yaml <<'EOF'
logging:
  dir: runs/logs
checkpoint:
  interval: 10
  dir: ckpt-from-config
EOF
printf '#!/bin/sh\nexit 0\n' >"$work/bin/collage"
# The stub mpirun records its arguments and the hostfile it was given, and exits with
# $STUB_STATUS.
cat >"$work/bin/mpirun" <<'EOF'
#!/usr/bin/env bash
printf '%s\n' "$@" >"$STUB_DIR/mpirun.args"
while [[ $# -gt 0 ]]; do
  [[ $1 == --hostfile ]] && cp "$2" "$STUB_DIR/mpirun.hostfile"
  shift
done
exit "${STUB_STATUS:-0}"
EOF
chmod +x "$work/bin/collage" "$work/bin/mpirun"
export STUB_DIR=$work
printf 'node-a slots=4\nnode-b   # the second node\n\n# a comment\nnode-a\n' >"$work/hosts"
: >"$work/no-hosts"

launch() {
  COLLAGE_BIN=$work/bin/collage COLLAGE_MPIRUN=$work/bin/mpirun "$launcher" "$@" 2>&1
}

# ---- mpirun-p4d.sh --dry-run on two nodes
out=$(launch --hostfile "$work/hosts" --dry-run -- configs/gpt.yaml \
  --set parallel.tensor_parallel=8 --set parallel.zero=1)
status=$?
cmd=$(command_of "$out")
expect_eq "dry run exits 0" "$status" 0
expect_eq "-np = 2 nodes x 8 GPUs" "$(np_of "$out")" 16
expect_eq "hostfile: each distinct host once with 8 slots" \
  "$(grep '^#   node-' <<<"$out")" "$(printf '#   node-a slots=8\n#   node-b slots=8')"
hostfile=$(sed -n 's/.* --hostfile \([^ ]*\) .*/\1/p' <<<"$cmd")
expect_eq "the hostfile in the command holds those lines" "$(cat "$hostfile" 2>&1)" \
  "$(printf 'node-a slots=8\nnode-b slots=8')"
expect_in "4 ranks per socket, bound to it" "$cmd" "--map-by ppr:4:socket --bind-to socket"
expect_in "ranks run in the current directory" "$cmd" "--wdir $project"
expect_in "MPI stays on TCP" "$cmd" "--mca pml ^cm --mca btl tcp,self --mca btl_tcp_if_exclude lo,docker0"
expect_in "GPUDirect RDMA over EFA exported" "$cmd" "-x FI_EFA_USE_DEVICE_RDMA=1"
expect_in "OpenMP threads: 96 vCPUs / 8 ranks" "$cmd" "-x OMP_NUM_THREADS=12"
expect_in "the environment is listed" "$out" "#   FI_EFA_USE_DEVICE_RDMA=1"
expect_in "config and collage arguments passed through, in order" "$cmd" \
  "$work/bin/collage train configs/gpt.yaml --set parallel.tensor_parallel=8 --set parallel.zero=1"
expect_not_in "no --resume without --auto-resume" "$cmd" "--resume"

out=$(launch --hostfile "$work/hosts" --nodes 1 --dry-run -- configs/gpt.yaml)
expect_eq "--nodes 1: -np 8" "$(np_of "$out")" 8
expect_eq "--nodes 1: the first host only" "$(grep '^#   node-' <<<"$out")" "#   node-a slots=8"

out=$(launch --hostfile "$work/hosts" --gpus-per-node 4 --dry-run -- configs/gpt.yaml)
expect_eq "--gpus-per-node 4: -np 8" "$(np_of "$out")" 8
expect_in "--gpus-per-node 4: 2 ranks per socket" "$out" "--map-by ppr:2:socket"
expect_in "--gpus-per-node 4: 24 OpenMP threads" "$out" "-x OMP_NUM_THREADS=24"

# The caller's environment: NCCL_*/FI_* forwarded, defaults overridden or left out.
out=$(NCCL_DEBUG=INFO FI_PROVIDER=efa FI_EFA_USE_DEVICE_RDMA=0 OMP_NUM_THREADS=3 \
  COLLAGE_EXPORT="MY_SETTING" MY_SETTING=a.b launch --hostfile "$work/hosts" --dry-run -- configs/gpt.yaml)
cmd=$(command_of "$out")
expect_in "NCCL_DEBUG forwarded" "$cmd" "-x NCCL_DEBUG=INFO"
expect_in "FI_PROVIDER forwarded" "$cmd" "-x FI_PROVIDER=efa"
expect_in "FI_EFA_USE_DEVICE_RDMA overridden" "$cmd" "-x FI_EFA_USE_DEVICE_RDMA=0"
expect_in "OMP_NUM_THREADS overridden" "$cmd" "-x OMP_NUM_THREADS=3"
expect_in "COLLAGE_EXPORT names forwarded" "$cmd" "-x MY_SETTING=a.b"
out=$(FI_EFA_USE_DEVICE_RDMA='' launch --hostfile "$work/hosts" --dry-run -- configs/gpt.yaml)
expect_not_in "a default set to empty is left out" "$(command_of "$out")" "FI_EFA_USE_DEVICE_RDMA"
out=$(P4D_EFA_LIB_DIRS="$work/efa/lib:$work/efa/missing" LD_LIBRARY_PATH=/usr/lib/x \
  launch --hostfile "$work/hosts" --dry-run -- configs/gpt.yaml)
expect_in "existing EFA library directories go first on LD_LIBRARY_PATH" "$(command_of "$out")" \
  "-x LD_LIBRARY_PATH=$work/efa/lib:/usr/lib/x "

# ---- errors: non-zero with a message naming the problem
expect_error() { # expect_error NAME MESSAGE launcher-args...
  local output status
  output=$(launch "${@:3}")
  status=$?
  if [[ $status -ne 0 && $output == *"$2"* ]]; then pass; else fail "$1: exit $status, expected non-zero and '$2'" "$output"; fi
}
expect_error "missing hostfile" "hostfile '$work/nope' not found" --hostfile "$work/nope" --dry-run -- configs/gpt.yaml
expect_error "no --hostfile" "--hostfile FILE is required" --dry-run -- configs/gpt.yaml
expect_error "empty hostfile" "names no host" --hostfile "$work/no-hosts" --dry-run -- configs/gpt.yaml
expect_error "missing config" "config 'configs/missing.yaml' not found" --hostfile "$work/hosts" --dry-run -- configs/missing.yaml
expect_error "no config" "no config" --hostfile "$work/hosts" --dry-run --
expect_error "more nodes than hosts" "--nodes 3 but hostfile '$work/hosts' names only 2 host(s)" \
  --hostfile "$work/hosts" --nodes 3 --dry-run -- configs/gpt.yaml
expect_error "--nodes 0" "--nodes needs a positive integer" --hostfile "$work/hosts" --nodes 0 --dry-run -- configs/gpt.yaml
expect_error "GPUs not splitting over 2 sockets" "does not split evenly" \
  --hostfile "$work/hosts" --gpus-per-node 3 --dry-run -- configs/gpt.yaml
expect_error "unknown option" "unknown option '--frobnicate'" --frobnicate --hostfile "$work/hosts" -- configs/gpt.yaml
out=$(COLLAGE_BIN=$work/bin/missing-collage COLLAGE_MPIRUN=$work/bin/mpirun "$launcher" \
  --hostfile "$work/hosts" --dry-run -- configs/gpt.yaml 2>&1)
status=$?
if [[ $status -ne 0 && $out == *"collage binary '$work/bin/missing-collage' not found"* ]]; then pass; else fail "missing collage binary: exit $status" "$out"; fi
out=$(COLLAGE_BIN=$work/bin/collage COLLAGE_MPIRUN=$work/bin/no-mpirun "$launcher" \
  --hostfile "$work/hosts" --dry-run -- configs/gpt.yaml 2>&1)
status=$?
if [[ $status -ne 0 && $out == *"mpirun not found"* ]]; then pass; else fail "missing mpirun: exit $status" "$out"; fi

# ---- --auto-resume: --resume latest only when <checkpoint dir>/latest exists
resume_count() { grep -o -- '--resume' <<<"$(command_of "$1")" | wc -l; }
out=$(launch --hostfile "$work/hosts" --auto-resume --dry-run -- configs/gpt.yaml)
expect_eq "no checkpoint yet: no --resume" "$(resume_count "$out")" 0
expect_in "no checkpoint yet: says so" "$out" "fresh start (runs/test/checkpoints/latest does not exist yet)"
mkdir -p runs/test/checkpoints && echo step_00000010.ckpt >runs/test/checkpoints/latest
out=$(launch --hostfile "$work/hosts" --auto-resume --dry-run -- configs/gpt.yaml --set parallel.zero=1)
expect_in "<logging.dir>/checkpoints/latest exists: --resume latest" "$(command_of "$out")" \
  "train configs/gpt.yaml --set parallel.zero=1 --resume latest"
out=$(launch --hostfile "$work/hosts" --dry-run -- configs/gpt.yaml)
expect_eq "without --auto-resume: no --resume" "$(resume_count "$out")" 0
out=$(launch --hostfile "$work/hosts" --auto-resume --dry-run -- configs/gpt.yaml --set logging.dir=runs/other)
expect_eq "--set logging.dir moves the checkpoint dir: no --resume" "$(resume_count "$out")" 0
expect_in "--set logging.dir: looks in runs/other/checkpoints" "$out" "runs/other/checkpoints/latest"
mkdir -p ck && touch ck/latest
out=$(launch --hostfile "$work/hosts" --auto-resume --dry-run -- configs/gpt.yaml --set=checkpoint.dir=ck --set logging.dir=runs/other)
expect_eq "--set=checkpoint.dir=ck with ck/latest: --resume" "$(resume_count "$out")" 1
out=$(launch --hostfile "$work/hosts" --auto-resume --dry-run -- configs/with-checkpoint-dir.yaml)
expect_in "checkpoint.dir from the config" "$out" "ckpt-from-config/latest does not exist yet"
out=$(launch --hostfile "$work/hosts" --auto-resume --checkpoint-dir ck --dry-run -- configs/with-checkpoint-dir.yaml)
expect_eq "--checkpoint-dir ck: --resume" "$(resume_count "$out")" 1
out=$(launch --hostfile "$work/hosts" --auto-resume --dry-run -- configs/gpt.yaml --resume ck/step_1.ckpt)
expect_eq "the user's own --resume is not doubled" "$(resume_count "$out")" 1
# A requeued job waits for the previous one's lock on the run's directories.
expect_in "--auto-resume: --wait-lock 120 after the resume" "$(command_of "$(launch --hostfile "$work/hosts" --auto-resume --checkpoint-dir ck --dry-run -- configs/gpt.yaml)")" \
  "train configs/gpt.yaml --resume latest --wait-lock 120"
out=$(launch --hostfile "$work/hosts" --auto-resume --dry-run -- configs/gpt.yaml --wait-lock=5)
expect_eq "the user's own --wait-lock is not doubled" "$(grep -o -- '--wait-lock' <<<"$(command_of "$out")" | wc -l)" 1
expect_not_in "no --wait-lock without --auto-resume" "$(command_of "$(launch --hostfile "$work/hosts" --dry-run -- configs/gpt.yaml)")" "--wait-lock"

# ---- the real-run path (stub mpirun): the dry run's command is what runs
dry=$(command_of "$(launch --hostfile "$work/hosts" --dry-run -- configs/gpt.yaml --set parallel.zero=1)")
out=$(STUB_STATUS=3 launch --hostfile "$work/hosts" -- configs/gpt.yaml --set parallel.zero=1)
status=$?
expect_eq "mpirun's exit status is the launcher's" "$status" 3
ran=$(tr '\n' ' ' <"$work/mpirun.args" | sed 's/ $//')
# (the dry run's first word is the mpirun path, the stub's record starts after it)
# shellcheck disable=SC2001
expect_eq "the same command as the dry run (but its hostfile)" \
  "$(sed -e 's/--hostfile [^ ]*/--hostfile H/' <<<"$ran")" \
  "$(sed -e 's/--hostfile [^ ]*/--hostfile H/' -e 's/^[^ ]* //' <<<"$dry")"
expect_eq "mpirun got the 2-node hostfile" "$(cat "$work/mpirun.hostfile")" "$(printf 'node-a slots=8\nnode-b slots=8')"
used_hostfile=$(sed -n '/^--hostfile$/{n;p;}' "$work/mpirun.args")
if [[ -n $used_hostfile && ! -e $used_hostfile ]]; then pass; else fail "the generated hostfile is removed after the run: $used_hostfile"; fi

# ---- stopping (stop-signals.sh): a signal to the launcher reaches mpirun as SIGUSR1, which
# Open MPI forwards to every rank; the launcher exits with mpirun's status (75 from collage).
# The stub mpirun stands for the job: it runs until a signal and exits 75 on SIGUSR1, 1 on
# SIGTERM (Open MPI's kill), recording the signal.
cat >"$work/bin/waiting-mpirun" <<'EOF'
#!/usr/bin/env bash
trap 'echo USR1 >>"$STUB_DIR/signals"; exit 75' USR1
trap 'echo TERM >>"$STUB_DIR/signals"; exit 1' TERM
: >"$STUB_DIR/started"
while :; do sleep 0.05; done
EOF
chmod +x "$work/bin/waiting-mpirun"
# stop_launcher SIGNAL...: starts the launcher, sends each signal (0.3 s apart) once the stub
# runs; prints the launcher's exit status and the signals the stub got.
stop_launcher() {
  rm -f "$work/started" "$work/signals"
  # Job control: without it a background command starts with SIGINT ignored, and bash cannot
  # trap a signal ignored on entry (a terminal's or a container's launcher gets it).
  set -m
  COLLAGE_BIN=$work/bin/collage COLLAGE_MPIRUN=$work/bin/waiting-mpirun \
    "$launcher" --hostfile "$work/hosts" -- configs/gpt.yaml >"$work/stop.out" 2>&1 &
  local job=$! signal status
  for _ in $(seq 200); do [[ -e $work/started ]] && break; sleep 0.05; done
  for signal in "$@"; do kill -"$signal" "$job"; sleep 0.3; done
  wait "$job"
  status=$?
  echo "$status $(tr '\n' ' ' <"$work/signals" 2>/dev/null)"
}
for signal in TERM INT HUP USR1 USR2; do
  expect_eq "SIG$signal to the launcher: SIGUSR1 to mpirun, exit 75" "$(stop_launcher "$signal")" "75 USR1 "
done
expect_in "the launcher says what it does" "$(cat "$work/stop.out")" \
  "SIGUSR2 received: every rank stops after its current step with a checkpoint"
# Ctrl-C twice: the second one ends the job at once (SIGTERM to mpirun). The stub ignores the
# first SIGUSR1 here, as ranks still finishing a step would.
sed -i 's/exit 75/:/' "$work/bin/waiting-mpirun"
expect_eq "a second SIGINT: SIGTERM to mpirun" "$(stop_launcher INT INT)" "1 USR1 TERM "

# ---- slurm-p4d.sbatch as a plain bash script in a fake 2-node job
mkdir -p "$work/slurm-bin"
cat >"$work/slurm-bin/scontrol" <<'EOF'
#!/usr/bin/env bash
echo "$*" >>"$STUB_DIR/scontrol.log"
case "$1 $2" in
  "show hostnames") [[ $3 == "p4d-[1-2]" ]] && printf 'p4d-1\np4d-2\n' ;;
  "requeue "*) ;;
  *) exit 1 ;;
esac
EOF
chmod +x "$work/slurm-bin/scontrol"
slurm_job() {
  PATH=$work/slurm-bin:$PATH SLURM_JOB_ID=42 SLURM_JOB_NODELIST='p4d-[1-2]' SLURM_NTASKS_PER_NODE=8 \
    SLURM_SUBMIT_DIR=$repo COLLAGE_BIN=$work/bin/collage COLLAGE_MPIRUN=$work/bin/mpirun \
    bash "$sbatch_script" "$@" 2>&1
}
rm -rf runs/test/checkpoints
out=$(COLLAGE_DRY_RUN=1 slurm_job configs/gpt.yaml --set parallel.tensor_parallel=8 --set parallel.zero=1)
status=$?
cmd=$(command_of "$out")
expect_eq "sbatch dry run exits 0" "$status" 0
expect_eq "sbatch: -np = 2 nodes x 8 tasks" "$(np_of "$out")" 16
expect_eq "sbatch: the job's hosts, 8 slots each" "$(grep '^#   p4d-' <<<"$out")" \
  "$(printf '#   p4d-1 slots=8\n#   p4d-2 slots=8')"
expect_in "sbatch: EFA variable exported" "$cmd" "-x FI_EFA_USE_DEVICE_RDMA=1"
expect_in "sbatch: binding" "$cmd" "--map-by ppr:4:socket --bind-to socket"
expect_in "sbatch: config and arguments passed through" "$cmd" \
  "train configs/gpt.yaml --set parallel.tensor_parallel=8 --set parallel.zero=1"
expect_eq "sbatch, first run: no --resume" "$(resume_count "$out")" 0
mkdir -p runs/test/checkpoints && echo step_00000010.ckpt >runs/test/checkpoints/latest
out=$(COLLAGE_DRY_RUN=1 SLURM_RESTART_COUNT=1 slurm_job configs/gpt.yaml --set parallel.tensor_parallel=8)
expect_in "sbatch, requeued with a checkpoint: --resume latest" "$(command_of "$out")" \
  "--set parallel.tensor_parallel=8 --resume latest"
expect_in "sbatch: logs the restart" "$out" "job 42, restart 1, nodes: p4d-1 p4d-2"

out=$(COLLAGE_DRY_RUN=1 slurm_job configs/missing.yaml)
status=$?
if [[ $status -ne 0 && $out == *"config 'configs/missing.yaml' not found"* ]]; then pass; else fail "sbatch: missing config: exit $status" "$out"; fi
out=$(slurm_job)
status=$?
if [[ $status -ne 0 && $out == *"no config"* ]]; then pass; else fail "sbatch: no config: exit $status" "$out"; fi
out=$(PATH=$work/slurm-bin:$PATH bash "$sbatch_script" configs/gpt.yaml 2>&1)
status=$?
if [[ $status -ne 0 && $out == *"not inside a Slurm job"* ]]; then pass; else fail "sbatch outside Slurm: exit $status" "$out"; fi

# USR1 (Slurm's warning 120 s before the time limit): the script passes it to the launcher,
# waits for the launcher to stop (its ranks finish their step and checkpoint: 0.5 s here), and
# requeues the job only once it exited 75, with a checkpoint. TERM (scancel --batch) is passed
# on without a requeue. The stub launcher records its arguments and signals.
# launcher.args is the test's sign that the stub is ready for a signal, so the stub sets its
# traps first and then renames a whole file into place: a redirection creates the file empty
# before it is written, and a signal before `trap` kills the stub (status 138).
cat >"$work/bin/slow-launcher" <<'EOF'
#!/usr/bin/env bash
trap 'echo USR1 >>"$STUB_DIR/launcher.signals"; sleep 0.5; exit ${STOP_STATUS:-75}' USR1
trap 'echo TERM >>"$STUB_DIR/launcher.signals"; exit 75' TERM
printf '%s\n' "$@" >"$STUB_DIR/launcher.args.partial"
mv "$STUB_DIR/launcher.args.partial" "$STUB_DIR/launcher.args"
while :; do sleep 0.05; done
EOF
chmod +x "$work/bin/slow-launcher"
# slurm_stop SIGNAL [STOP_STATUS]: the batch script with the stub launcher, sent SIGNAL; prints
# its exit status.
slurm_stop() {
  rm -f "$work/scontrol.log" "$work/launcher.args" "$work/launcher.signals"
  # (env execs bash, so $! is the batch script's shell itself)
  env PATH="$work/slurm-bin:$PATH" SLURM_JOB_ID=42 SLURM_JOB_NODELIST='p4d-[1-2]' SLURM_NTASKS_PER_NODE=8 \
    STOP_STATUS="${2:-75}" COLLAGE_LAUNCHER="$work/bin/slow-launcher" bash "$sbatch_script" configs/gpt.yaml >"$work/usr1.out" 2>&1 &
  local job=$!
  for _ in $(seq 200); do [[ -e $work/launcher.args ]] && break; sleep 0.05; done
  kill -"$1" "$job"
  wait "$job"
  echo $?
}
expect_eq "USR1: the script exits with the launcher's status" "$(slurm_stop USR1)" 75
expect_eq "USR1 reaches the launcher" "$(cat "$work/launcher.signals" 2>&1)" USR1
if grep -q '^requeue 42$' "$work/scontrol.log" 2>/dev/null; then pass; else fail "USR1: scontrol requeue 42 after the stop" "$(cat "$work/usr1.out")"; fi
expect_in "USR1: says it requeues after the checkpoint" "$(cat "$work/usr1.out")" \
  "stopped with a checkpoint: requeueing job 42"
expect_in "the launcher gets --auto-resume and the job's hostfile" "$(tr '\n' ' ' <"$work/launcher.args")" \
  "--gpus-per-node 8 --auto-resume -- configs/gpt.yaml"
expect_eq "USR1, the launcher failing: its status" "$(slurm_stop USR1 1)" 1
if ! grep -q requeue "$work/scontrol.log" 2>/dev/null; then pass; else fail "USR1, the launcher failing: no requeue"; fi
expect_in "USR1, the launcher failing: says why there is no requeue" "$(cat "$work/usr1.out")" \
  "exited with status 1, not 75"
expect_eq "TERM (scancel --batch): the launcher's status" "$(slurm_stop TERM)" 75
expect_eq "TERM reaches the launcher" "$(cat "$work/launcher.signals" 2>&1)" TERM
if ! grep -q requeue "$work/scontrol.log" 2>/dev/null; then pass; else fail "TERM: no requeue"; fi

# ---- Open MPI's own placement of the launcher's command (mpirun --do-not-launch)
if mpirun --version 2>/dev/null | grep -q "Open MPI"; then
  # mpirun takes every node to have the launching host's topology: the synthetic two-socket one.
  topology="--mca hwloc_base_topo_file $repo/tests/launch/two-socket-topology.xml"
  real_launch() {
    COLLAGE_BIN=$work/bin/collage COLLAGE_MPIRUN=$(command -v mpirun) \
      COLLAGE_MPIRUN_ARGS="--do-not-launch $topology $1" timeout 120 "$launcher" "${@:2}" 2>&1
  }
  map=$(real_launch "--display-map" --hostfile "$work/hosts" -- configs/gpt.yaml)
  placement=$(awk '/Data for node:/ { node = $4 } /Process rank:/ { for (i = 1; i <= NF; i++) if ($i == "rank:") print $(i + 1) "@" node }' <<<"$map" | tr '\n' ' ')
  expect_eq "Open MPI places ranks 0-7 on node-a, 8-15 on node-b" "$placement" \
    "$(for r in $(seq 0 15); do printf '%s@node-%s ' "$r" "$( ((r < 8)) && echo a || echo b)"; done)"
  echo localhost >"$work/local-host"
  bind=$(real_launch "--mca rmaps_base_verbose 10" --hostfile "$work/local-host" -- configs/gpt.yaml)
  bound=$(sed -n 's/.*BOUND PROC \[\[[0-9]*,[0-9]*\],\([0-9]*\)\] TO [^[]*\[\(Package:[0-9]\)\].*/\1:\2/p' <<<"$bind" | tr '\n' ' ')
  expect_eq "Open MPI binds ranks 0-3 to socket 0, 4-7 to socket 1" "$bound" \
    "0:Package:0 1:Package:0 2:Package:0 3:Package:0 4:Package:1 5:Package:1 6:Package:1 7:Package:1 "
else
  echo "skipped: Open MPI's placement checks (mpirun is not Open MPI)"
fi

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
