#!/usr/bin/env bash
# An irn experiment as a Slurm job array: one shard of its runs per array task, then the merge.
#
#   scripts/slurm-sweep.sh EXPERIMENT.toml N OUTDIR [irn sim flags…]
#
# submits this script as `sbatch --array=0-(N-1)`: task I runs
#   irn sim EXPERIMENT --shard I/N --json OUTDIR/shard-I.json [flags]
# and, once every task has succeeded (afterok), a merge job runs
#   irn merge OUTDIR/results.json OUTDIR/shard-*.json --plot OUTDIR/results.svg
# whose table goes to OUTDIR/table.txt. OUTDIR/results.json is the JSON the unsharded run
# writes (wall times aside). The experiment, OUTDIR and the binary must be on a filesystem
# every node sees.
#
# Environment: IRN, the irn binary (default: target/release/irn of this checkout);
# SLURM_SWEEP_WAIT=1 to return only when the merge is done (its exit status: 0 when every
# piece ran); SBATCH_* variables as sbatch reads them (partition, account, time).
#SBATCH --job-name=irn-sweep
#SBATCH --cpus-per-task=1
set -euo pipefail

# irn sim and irn merge exit 1 when some flow of some run failed — a result (an E11
# experiment has them), not a failed task; 2 is an error.
result_ok() { [ "$1" -le 1 ]; }

case "${SWEEP_ROLE:-submit}" in
shard)
    mapfile -t extra <"$SWEEP_OUT/sweep.args"
    rc=0
    "$SWEEP_IRN" sim "$SWEEP_EXP" --quiet --jobs "${SLURM_CPUS_PER_TASK:-1}" \
        --shard "$SLURM_ARRAY_TASK_ID/$SWEEP_N" \
        --json "$SWEEP_OUT/shard-$SLURM_ARRAY_TASK_ID.json" "${extra[@]}" || rc=$?
    result_ok "$rc"
    ;;
merge)
    shards=()
    for i in $(seq 0 $((SWEEP_N - 1))); do shards+=("$SWEEP_OUT/shard-$i.json"); done
    rc=0
    "$SWEEP_IRN" merge "$SWEEP_OUT/results.json" "${shards[@]}" \
        --plot "$SWEEP_OUT/results.svg" >"$SWEEP_OUT/table.txt" || rc=$?
    result_ok "$rc"
    ;;
submit)
    [ $# -ge 3 ] || { sed -n '2,18p' "$0" >&2; exit 2; }
    exp=$(realpath "$1") n=$2 out=$3
    shift 3
    [[ $n =~ ^[1-9][0-9]*$ ]] || { echo "slurm-sweep: N must be a positive number, not $n" >&2; exit 2; }
    [ -r "$exp" ] || { echo "slurm-sweep: cannot read $exp" >&2; exit 2; }
    root=$(cd "$(dirname "$0")/.." && pwd)
    irn=$(realpath "${IRN:-$root/target/release/irn}")
    [ -x "$irn" ] || { echo "slurm-sweep: no irn binary at $irn (cargo build --release)" >&2; exit 2; }
    mkdir -p "$out"
    out=$(realpath "$out")
    rm -f "$out"/shard-*.json "$out/results.json"
    printf '%s\n' "$@" >"$out/sweep.args"
    env=(--export="ALL,SWEEP_EXP=$exp,SWEEP_N=$n,SWEEP_OUT=$out,SWEEP_IRN=$irn")
    array=$(SWEEP_ROLE=shard sbatch --parsable --array="0-$((n - 1))" \
        --output="$out/shard-%a.log" "${env[@]},SWEEP_ROLE=shard" "$0")
    array=${array%%;*}
    echo "slurm-sweep: array job $array (${n} shards of $exp) → $out"
    wait=()
    [ "${SLURM_SWEEP_WAIT:-0}" = 1 ] && wait=(--wait)
    rc=0
    SWEEP_ROLE=merge sbatch --parsable "${wait[@]}" --dependency="afterok:$array" \
        --kill-on-invalid-dep=yes --output="$out/merge.log" "${env[@]},SWEEP_ROLE=merge" "$0" || rc=$?
    if [ ${#wait[@]} -gt 0 ]; then
        [ "$rc" = 0 ] || { echo "slurm-sweep: the merge did not run or failed (logs in $out)" >&2; exit 1; }
        cat "$out/table.txt"
    fi
    ;;
esac
