#!/bin/bash
# Open MPI: (1) mpirun -np 4 launch+exit time of /bin/true and of an mpi4py
# MPI_Init+exit, median of 5 each; (2) mpi4py Allreduce busbw of 1/16/64 MiB float32.
# Loopback/shared memory only: ob1 over the self+vader (shm) BTLs, ORTE over lo.
set -euo pipefail
# hard bound of 58 s for the whole script and all it starts
[ -n "${PEERS_BOUNDED:-}" ] || PEERS_BOUNDED=1 exec timeout -k 2 58 "$0" "$@"
cd "$(dirname "$0")"
py=/usr/bin/python3   # Debian's mpi4py; a pyenv python3 earlier on PATH lacks it
mpirun=(timeout -k 2 40 mpirun --allow-run-as-root --oversubscribe -np 4 --bind-to none
        --mca pml ob1 --mca btl self,vader --mca oob_tcp_if_include lo)
now() { date +%s.%N; }
median() { printf '%s\n' "$@" | sort -g | sed -n "$(( ($# + 1) / 2 ))p"; }
secs() { local t0 t1; t0=$(now); "$@"; t1=$(now); awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }'; }
echo "$(mpirun --version | head -1); mpi4py $($py -c 'import mpi4py; print(mpi4py.__version__)')"
"${mpirun[@]}" true  # warm-up
t_true=(); t_py=()
for i in 1 2 3 4 5; do
  t_true+=("$(secs "${mpirun[@]}" true)")
  t_py+=("$(secs "${mpirun[@]}" $py -c 'from mpi4py import MPI; MPI.COMM_WORLD.Barrier()')")
done
echo "runs (s): mpirun -np 4 true: ${t_true[*]}; with python3 mpi4py init+barrier: ${t_py[*]}"
echo "mpi_launch_4proc_true $(median "${t_true[@]}") s"
echo "mpi_launch_4proc_mpi4py $(median "${t_py[@]}") s"
"${mpirun[@]}" $py mpi_allreduce.py  # its last line: mpi_allreduce_busbw_64MiB
