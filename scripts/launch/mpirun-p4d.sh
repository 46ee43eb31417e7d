#!/usr/bin/env bash
# Launch `collage train` on AWS p4d.24xlarge nodes with Open MPI: one rank per GPU, NCCL over EFA.
#
#   scripts/launch/mpirun-p4d.sh --hostfile FILE [--nodes N] [--gpus-per-node 8]
#       [--auto-resume] [--checkpoint-dir DIR] [--dry-run] -- CONFIG [collage train args...]
#
#   # GPT 1.3B as the Collage paper trains it: tensor parallel 8 inside each node, data parallel
#   # across 2 nodes (16 ranks = TP 8 x DP 2), optimizer state sharded over DP (ZeRO-1)
#   scripts/launch/mpirun-p4d.sh --hostfile hosts --nodes 2 -- configs/gpt/1.3b.yaml \
#       --set parallel.tensor_parallel=8 --set parallel.zero=1
#   # GPT 125M on one node: data parallel 8 (the config's tensor_parallel 1)
#   scripts/launch/mpirun-p4d.sh --hostfile hosts --nodes 1 -- configs/gpt/125m.yaml
#
# Runs `mpirun -np NODES*GPUS ... COLLAGE_BIN train CONFIG [args...]` from the current directory
# (every node must see it, and the binary, at the same path: a shared file system):
#  - ranks fill the nodes in hostfile order, GPUS per node: ranks 0-7 on the first host, 8-15 on
#    the second, ... With parallel.tensor_parallel=8 a tensor-parallel group is one node
#    (NVSwitch) and data parallelism crosses nodes over EFA (docs/ARCHITECTURE.md, "Rank
#    layout"). Each rank drives the GPU numbered by its node-local rank.
#  - binding: GPUS/2 ranks per socket, each bound to its socket's cores, so ranks 0-3 of a node
#    (GPUs 0-3) run on socket 0 and ranks 4-7 on socket 1, next to their GPU and its memory.
#  - environment: scripts/launch/p4d-env.sh (what AWS documents for NCCL over EFA, with why),
#    plus every NCCL_*, FI_*, OFI_NCCL_* and OMP_* variable of the caller, exported to every
#    rank with -x; the names in COLLAGE_EXPORT (space-separated) as well.
#  - stopping: SIGTERM, SIGINT, SIGHUP, SIGUSR1 or SIGUSR2 sent to this script (not to mpirun)
#    stops every rank after its current step with a checkpoint, and this script exits 75
#    (scripts/launch/stop-signals.sh). Make it the container's main process (exec it) so that
#    `docker stop` or Kubernetes' SIGTERM reaches it.
#
# Options:
#   --hostfile FILE     hosts, one per line (`host` or `host slots=N`; slots are replaced by
#                       --gpus-per-node; repeated hosts count once; # comments)
#   --nodes N           use the first N hosts of the hostfile (default: all)
#   --gpus-per-node G   ranks per node (default 8)
#   --auto-resume       add `--resume latest` when <checkpoint dir>/latest exists, i.e. after a
#                       preemption or requeue; a first run starts fresh. Either way add
#                       `--wait-lock 120` (unless given): the job before a requeue may still be
#                       ending and hold the run's directories for a moment
#   --checkpoint-dir D  the checkpoint directory --auto-resume looks in (default: read from
#                       the --set arguments, then the config: checkpoint.dir, else
#                       <logging.dir>/checkpoints)
#   --dry-run           print the hostfile, environment and exact mpirun command; run nothing
# Environment: COLLAGE_BIN (default: build/collage of this repository), COLLAGE_MPIRUN (default:
# the mpirun beside the libmpi COLLAGE_BIN links, else mpirun on PATH), COLLAGE_MPIRUN_ARGS
# (extra mpirun options, word-split), COLLAGE_MPI_MCA (Open MPI transport options, see
# scripts/launch/p4d-env.sh).
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd "$script_dir/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=p4d-env.sh
source "$script_dir/p4d-env.sh"

fail() {
  echo "mpirun-p4d: error: $*" >&2
  exit 2
}
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; }
need_value() { [[ $# -ge 2 ]] || fail "$1 needs a value"; }
positive_int() { [[ $2 =~ ^[1-9][0-9]*$ ]] || fail "$1 needs a positive integer, got '$2'"; }

# ---- arguments
hostfile="" nodes="" gpus_per_node=8 auto_resume=0 checkpoint_dir="" dry_run=0
while [[ $# -gt 0 ]]; do
  case $1 in
    -h | --help) usage && exit 0 ;;
    --hostfile) need_value "$@" && hostfile=$2 && shift 2 ;;
    --nodes) need_value "$@" && nodes=$2 && shift 2 ;;
    --gpus-per-node) need_value "$@" && gpus_per_node=$2 && shift 2 ;;
    --checkpoint-dir) need_value "$@" && checkpoint_dir=$2 && shift 2 ;;
    --auto-resume) auto_resume=1 && shift ;;
    --dry-run) dry_run=1 && shift ;;
    --) shift && break ;;
    -*) fail "unknown option '$1' (see --help; collage's own arguments go after --)" ;;
    *) break ;;
  esac
done
[[ $# -ge 1 ]] || fail "no config: usage: mpirun-p4d.sh --hostfile FILE [options] -- CONFIG [collage train args...]"
config=$1
shift
train_args=("$@")

# ---- checks
[[ -n $hostfile ]] || fail "--hostfile FILE is required (one host per line; under Slurm use scripts/launch/slurm-p4d.sbatch)"
[[ -f $hostfile ]] || fail "hostfile '$hostfile' not found"
[[ -f $config ]] || fail "config '$config' not found (paths are relative to the current directory, $PWD)"
positive_int --gpus-per-node "$gpus_per_node"
[[ -z $nodes ]] || positive_int --nodes "$nodes"
((gpus_per_node % P4D_SOCKETS_PER_NODE == 0)) ||
  fail "--gpus-per-node $gpus_per_node does not split evenly over the $P4D_SOCKETS_PER_NODE sockets of a p4d node"

collage=${COLLAGE_BIN:-$repo_root/build/collage}
[[ -f $collage && -x $collage ]] ||
  fail "collage binary '$collage' not found or not executable: build it (cmake --build build) or set COLLAGE_BIN"
collage=$(cd "$(dirname "$collage")" && pwd)/$(basename "$collage") # every node runs this path

# The mpirun of the Open MPI the binary was linked with: another MPI's mpirun cannot start it.
find_mpirun() {
  if [[ -n ${COLLAGE_MPIRUN:-} ]]; then
    printf '%s\n' "$COLLAGE_MPIRUN"
    return
  fi
  local libmpi
  libmpi=$(ldd "$collage" 2>/dev/null | awk '$1 ~ /^libmpi\.so/ && $3 ~ /^\// { print $3; exit }') || true
  if [[ -n $libmpi && -x $(dirname "$libmpi")/../bin/mpirun ]]; then
    (cd "$(dirname "$libmpi")/../bin" && printf '%s/mpirun\n' "$(pwd)")
  elif command -v mpirun >/dev/null; then
    command -v mpirun
  elif [[ -x /opt/amazon/openmpi/bin/mpirun ]]; then
    printf '%s\n' /opt/amazon/openmpi/bin/mpirun
  fi
}
mpirun=$(find_mpirun) || true
[[ -n $mpirun && -x $mpirun ]] ||
  fail "mpirun not found: put Open MPI's bin on PATH (the EFA installer's is /opt/amazon/openmpi/bin) or set COLLAGE_MPIRUN"

# ---- hosts: the first N distinct hosts of the hostfile, each with one slot per GPU
mapfile -t hosts < <(awk '{ sub(/#.*/, "") } NF && !seen[$1]++ { print $1 }' "$hostfile")
[[ ${#hosts[@]} -gt 0 ]] || fail "hostfile '$hostfile' names no host"
nodes=${nodes:-${#hosts[@]}}
((nodes <= ${#hosts[@]})) || fail "--nodes $nodes but hostfile '$hostfile' names only ${#hosts[@]} host(s)"
hosts=("${hosts[@]:0:nodes}")
ranks=$((nodes * gpus_per_node))

# ---- resume: only when a checkpoint exists (a first run has none)
# yaml_scalar FILE SECTION KEY: SECTION.KEY of a block-style YAML file (as configs/ are written).
yaml_scalar() {
  awk -v section="$2" -v key="$3" '
    /^[^[:space:]#]/ { inside = ($0 ~ ("^" section ":[[:space:]]*(#.*)?$")); indent = -1; next }
    inside && /^[[:space:]]+[^[:space:]#]/ {
      match($0, /^[[:space:]]+/)
      if (indent < 0) indent = RLENGTH
      if (RLENGTH != indent) next
      line = substr($0, RLENGTH + 1)
      if (index(line, key ":") != 1) next
      value = substr(line, length(key) + 2)
      sub(/[[:space:]]+#.*$/, "", value)
      gsub(/^[[:space:]]+|[[:space:]]+$/, "", value)
      if (value ~ /^".*"$/ || value ~ /^\047.*\047$/) value = substr(value, 2, length(value) - 2)
      print value
      exit
    }' "$1"
}
unquote() {
  local value=$1
  [[ $value =~ ^\"(.*)\"$ || $value =~ ^\'(.*)\'$ ]] && value=${BASH_REMATCH[1]}
  printf '%s\n' "$value"
}
# The checkpoint directory collage will use: checkpoint.dir, else <logging.dir>/checkpoints,
# each from the last --set that gives it, else from the config, else collage's defaults.
resolve_checkpoint_dir() {
  local set_checkpoint="" set_logging="" arg in_set=0
  for arg in "${train_args[@]}"; do
    if [[ $arg == --set=* ]]; then
      arg=${arg#--set=}
      in_set=1
    elif [[ $arg == --set ]]; then
      in_set=1
      continue
    elif [[ $arg == -* ]]; then
      in_set=0
      continue
    fi
    if ((in_set)); then
      case $arg in
        checkpoint.dir=*) set_checkpoint=$(unquote "${arg#checkpoint.dir=}") ;;
        logging.dir=*) set_logging=$(unquote "${arg#logging.dir=}") ;;
      esac
    fi
  done
  local dir=${set_checkpoint:-$(yaml_scalar "$config" checkpoint dir)}
  if [[ -z $dir ]]; then
    local logging_dir=${set_logging:-$(yaml_scalar "$config" logging dir)}
    dir=${logging_dir:-runs/default}/checkpoints
  fi
  printf '%s\n' "$dir"
}
resume_note=""
if ((auto_resume)); then
  user_resumes=0 user_waits=0
  for arg in "${train_args[@]}"; do
    [[ $arg == --resume || $arg == --resume=* ]] && user_resumes=1
    [[ $arg == --wait-lock || $arg == --wait-lock=* ]] && user_waits=1
  done
  checkpoint_dir=${checkpoint_dir:-$(resolve_checkpoint_dir)}
  if ((user_resumes)); then
    resume_note="resume: as given in the collage arguments"
  elif [[ -f $checkpoint_dir/latest ]]; then
    train_args+=(--resume latest)
    resume_note="resume: --resume latest ($checkpoint_dir/latest exists)"
  else
    resume_note="resume: none, a fresh start ($checkpoint_dir/latest does not exist yet)"
  fi
  ((user_waits)) || train_args+=(--wait-lock 120)
fi

# ---- environment for every rank
: "${OMP_NUM_THREADS=$((P4D_VCPUS_PER_NODE / gpus_per_node))}" # a node's vCPUs shared by its ranks
LD_LIBRARY_PATH=$(p4d_library_path)
read -r -a extra_names <<<"${COLLAGE_EXPORT:-}"
mapfile -t export_names < <(
  {
    printf '%s\n' FI_EFA_USE_DEVICE_RDMA OMP_NUM_THREADS LD_LIBRARY_PATH "${extra_names[@]}"
    compgen -v | grep -E '^(NCCL_|FI_|OFI_NCCL_|OMP_)' || true
  } | sort -u
)
exports=()
for name in "${export_names[@]}"; do
  [[ -n $name && -n ${!name:-} ]] && exports+=(-x "$name=${!name}")
done

# ---- the command
generated_hostfile=$(mktemp "${TMPDIR:-/tmp}/collage-hostfile.XXXXXX")
for host in "${hosts[@]}"; do echo "$host slots=$gpus_per_node"; done >"$generated_hostfile"
read -r -a mca <<<"$COLLAGE_MPI_MCA"
read -r -a extra_mpirun <<<"${COLLAGE_MPIRUN_ARGS:-}"
cmd=("$mpirun" -np "$ranks" --hostfile "$generated_hostfile"
  --map-by "ppr:$((gpus_per_node / P4D_SOCKETS_PER_NODE)):socket" --bind-to socket --report-bindings
  --wdir "$PWD")
# Open MPI refuses to start as root without this (containers on p4d often run as root).
[[ $(id -u) -ne 0 ]] || cmd+=(--allow-run-as-root)
cmd+=("${mca[@]}" "${exports[@]}" "${extra_mpirun[@]}" "$collage" train "$config" "${train_args[@]}")

{
  echo "# collage on $nodes node(s) x $gpus_per_node GPUs = $ranks ranks"
  echo "# hostfile $generated_hostfile$( ((dry_run)) && echo " (kept for the command below)"):"
  sed 's/^/#   /' "$generated_hostfile"
  echo "# environment of every rank (-x):"
  for ((i = 1; i < ${#exports[@]}; i += 2)); do echo "#   ${exports[i]}"; done
  [[ -z $resume_note ]] || echo "# $resume_note"
} >&$((dry_run ? 1 : 2))

# The command as one shell line: plain words as they are, others quoted.
shell_line() {
  local arg line=""
  for arg in "$@"; do
    [[ $arg =~ ^[][A-Za-z0-9_./:=,^@%+-]+$ ]] || arg=$(printf '%q' "$arg")
    line+="${line:+ }$arg"
  done
  printf '%s\n' "$line"
}
if ((dry_run)); then
  shell_line "${cmd[@]}"
  exit 0
fi
trap 'rm -f "$generated_hostfile"' EXIT
echo "+ $(shell_line "${cmd[@]}")" >&2
# SIGTERM, SIGINT, SIGHUP, SIGUSR1 or SIGUSR2 to this script: every rank stops after its current
# step with a checkpoint, and this script exits 75 (stop-signals.sh says why mpirun itself must
# not get them).
# shellcheck source-path=SCRIPTDIR source=stop-signals.sh
source "$script_dir/stop-signals.sh"
status=0
run_with_stop_signals "${cmd[@]}" || status=$?
exit "$status"
