# shellcheck shell=bash
# Environment for NCCL over EFA on AWS p4d.24xlarge (8x A100 40 GB on NVSwitch, 4x 100 Gbps
# EFA, 2 sockets of 48 vCPUs), sourced by scripts/launch/mpirun-p4d.sh, which exports every
# variable below to all ranks with `mpirun -x`. Each is a default: a value already in the
# caller's environment wins, and a variable set to the empty string is left out altogether
# (e.g. `FI_EFA_USE_DEVICE_RDMA= scripts/launch/mpirun-p4d.sh ...`). Any NCCL_*, FI_* or
# OFI_NCCL_* variable set in the caller's environment is exported too (e.g. NCCL_DEBUG=INFO,
# whose log names the network: "NET/OFI Selected Provider is efa").
#
# What AWS documents, for the EFA installer's stack (libfabric in /opt/amazon/efa, Open MPI in
# /opt/amazon/openmpi, the aws-ofi-nccl plugin that lets NCCL use libfabric):
#  - with libfabric >= 1.18 (EFA installer >= 1.29) and aws-ofi-nccl >= 1.7 no variable is
#    needed; the plugin selects the efa provider and, on p4d, NCCL's topology file itself.
#  - set here: FI_EFA_USE_DEVICE_RDMA=1, which aws-ofi-nccl 1.6 needs and which is harmless
#    later (AWS's own NCCL test on p4d sets it).
#  - not set, on purpose: FI_PROVIDER=efa and NCCL_PROTO=simple (only for aws-ofi-nccl
#    <= 1.5: export them yourself on such an old stack, they are forwarded), NCCL_ALGO and
#    NCCL_MIN_CHANNELS/NCCL_BUFFSIZE (AWS: keep NCCL's defaults; p4d's 8 channels are already
#    the minimum for 4 NICs), RDMAV_FORK_SAFE (AWS: do not use, it can break newer kernels),
#    FI_EFA_FORK_SAFE (the plugin sets it), NCCL_TOPO_FILE (the plugin sets it on p4d).

# GPUDirect RDMA: the EFA devices read and write GPU memory directly, no staging through host
# memory. p4d supports it; aws-ofi-nccl 1.6 uses it only when asked, later versions by default.
: "${FI_EFA_USE_DEVICE_RDMA=1}"

# Where the EFA installer puts libfabric, its Open MPI and the aws-ofi-nccl plugin (NCCL finds
# the plugin, libnccl-net*.so, on LD_LIBRARY_PATH; older AMIs keep it in /opt/aws-ofi-nccl).
# Those that exist on the launching host are prepended to LD_LIBRARY_PATH for every rank.
: "${P4D_EFA_LIB_DIRS=/opt/amazon/efa/lib:/opt/amazon/efa/lib64:/opt/amazon/openmpi/lib:\
/opt/amazon/openmpi/lib64:/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu:/opt/amazon/ofi-nccl/lib:\
/opt/aws-ofi-nccl/lib}"

# Open MPI's own transport, as in AWS's NCCL test on p4d: collage's GPU runs do their
# collectives over NCCL, and MPI only starts the ranks and passes small host messages (NCCL's
# unique ids), so MPI stays on TCP (ob1 over tcp, not the EFA-backed cm PML) and leaves the
# EFA devices to NCCL; lo and docker0 are not interfaces between nodes.
: "${COLLAGE_MPI_MCA=--mca pml ^cm --mca btl tcp,self --mca btl_tcp_if_exclude lo,docker0}"

# p4d.24xlarge: 96 vCPUs in 2 sockets; GPUs 0-3 are attached to socket 0, GPUs 4-7 to socket 1.
# Both are read by scripts/launch/mpirun-p4d.sh.
# shellcheck disable=SC2034
P4D_VCPUS_PER_NODE=96
# shellcheck disable=SC2034
P4D_SOCKETS_PER_NODE=2

# LD_LIBRARY_PATH with the existing P4D_EFA_LIB_DIRS in front (each once).
p4d_library_path() {
  local path=${LD_LIBRARY_PATH:-} dir i
  local -a dirs
  IFS=: read -r -a dirs <<<"$P4D_EFA_LIB_DIRS"
  for ((i = ${#dirs[@]} - 1; i >= 0; i--)); do
    dir=${dirs[i]}
    [[ -n $dir && -d $dir ]] || continue
    case ":$path:" in
      *":$dir:"*) ;;
      *) path=$dir${path:+:$path} ;;
    esac
  done
  printf '%s\n' "$path"
}
