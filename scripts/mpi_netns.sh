#!/usr/bin/env bash
# Tokens/s of 2 MPI ranks in separate network namespaces joined by a veth pair whose both ends
# are rate-limited with `tc tbf` (issue 22), against the same ranks over shared memory and one
# process. Needs root, iproute2 and an `mpi` build of ferrox.
#
#   scripts/mpi_netns.sh MODEL.gguf [RATE=10gbit] [TOKENS=32]
#
# MPICH (ch4:ucx) is kept off shared memory with MPIR_CVAR_NOLOCAL=1 and UCX_TLS=tcp, and each
# rank's UCX is pointed at its namespace's veth end; the veth byte counters are printed so the
# traffic can be seen to cross it. netem (delay) would be the next step, but this kernel has no
# netem qdisc ("Specified qdisc kind is unknown"): the link has a rate, not a latency.
set -euo pipefail
model=$1
rate=${2:-10gbit}
tokens=${3:-32}
ferrox=${FERROX:-target/release/ferrox}
ferrox=$(realpath "$ferrox")
prompt="Write a short story about a lighthouse keeper who finds a message in a bottle."

cleanup() {
    ip netns del fxa 2>/dev/null || true
    ip netns del fxb 2>/dev/null || true
}
trap cleanup EXIT
cleanup
ip netns add fxa
ip netns add fxb
ip link add fxva type veth peer name fxvb
ip link set fxva netns fxa
ip link set fxvb netns fxb
ip -n fxa addr add 10.77.0.1/24 dev fxva
ip -n fxb addr add 10.77.0.2/24 dev fxvb
for ns in fxa fxb; do
    ip -n $ns link set lo up
done
ip -n fxa link set fxva up
ip -n fxb link set fxvb up
ip netns exec fxa tc qdisc add dev fxva root tbf rate "$rate" burst 1mb latency 1ms
ip netns exec fxb tc qdisc add dev fxvb root tbf rate "$rate" burst 1mb latency 1ms

args=(run -m "$model" --temp 0 --no-spec -n "$tokens" -t 1 --verbose "$prompt")
speeds() { grep -E "^(prompt eval|eval):" | sed 's/^/    /'; }
tx() { ip -n fxa -s link show fxva | awk '/TX:/{getline; print $1}'; }

echo "one process:"
"$ferrox" "${args[@]}" 2>&1 >/dev/null | speeds
for mode in expert pipeline; do
    echo "2 ranks, --$mode-parallel, shared memory:"
    mpiexec -n 2 "$ferrox" "${args[@]}" "--$mode-parallel" 2>&1 >/dev/null | speeds
    echo "2 ranks, --$mode-parallel, TCP over veth limited to $rate:"
    before=$(tx)
    mpiexec -genv MPIR_CVAR_NOLOCAL 1 -genv UCX_TLS tcp \
        -n 1 -env UCX_NET_DEVICES fxva ip netns exec fxa "$ferrox" "${args[@]}" "--$mode-parallel" : \
        -n 1 -env UCX_NET_DEVICES fxvb ip netns exec fxb "$ferrox" "${args[@]}" "--$mode-parallel" \
        2>&1 >/dev/null | speeds
    echo "    bytes sent by rank 0's veth end: $(($(tx) - before))"
done
