#!/usr/bin/env bash
# The long CPU runs behind the committed records of `bench lm`, `bench recall --recipe
# zoology` and `bench context`, as lanes of commands in priority order.  Every command
# stores each finished cell as a record under lab/results/ and skips the cells
# already recorded, so running a lane again resumes at its first unfinished cell (a cell
# interrupted part-way resumes from its checkpoint while its run directory is there).
#
#   lab/benchmarks/campaign.sh lm        # equal CPU-minutes and seeds (issue 30)
#   lab/benchmarks/campaign.sh zoology   # MQAR at Zoology's recipe (issue 31)
#   lab/benchmarks/campaign.sh context   # 16K-byte training, bits/byte by position (issue 31)
#   lab/benchmarks/campaign.sh listops   # ListOps after a short-first curriculum (issue 31)
#   lab/benchmarks/campaign.sh --list    # print the lanes' commands
#
# Two lanes can run side by side on a 2-core machine (each cell takes one thread:
# OMP_NUM_THREADS=1).  Times are for one thread of the 2-core VMs the records name.
# SIGINT or SIGTERM to the running `weirdnet bench` stops its cell cleanly (exit 130/143)
# and ends the lane there.
set -uo pipefail
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
OUT=(--out lab/results)

ZOOLOGY=(--recipe zoology --widths 64 --epochs 8 "${OUT[@]}")
lane_zoology() {  # about 10-25 min a cell at L = 64, 20-60 at L = 128, 15-90 at L = 256
    # the rate validation picked for most mechanisms at L = 64 (1e-2) first, at every
    # length, then the other rate; at each length the Transformer++ (the gate) first.
    # At the second rate the mechanisms 1e-2 left below 99% come first (the rate could
    # change their answer), those that solved MQAR at 1e-2 (B, the Transformer++) last;
    # at L = 256 first those that 2.2e-3 served better at L = 64 (local attention,
    # Relation), then linear attention (84.6% with a convolution at 1e-2, still rising).
    for lr in 1e-2 2.2e-3; do
        for mech in linear local relation; do
            for conv in 0 4; do
                echo "weirdnet bench recall ${ZOOLOGY[*]} --lrs $lr --lengths 64 --mechanisms $mech --short-convs $conv"
            done
        done
        mechs="transformerpp weird-b softmax weird-a ps linear local relation"
        [ "$lr" = 2.2e-3 ] && mechs="softmax weird-a ps linear local relation weird-b transformerpp"
        for length in 128 256; do
            [ "$lr" = 2.2e-3 ] && [ "$length" = 256 ] && \
                mechs="local relation linear softmax weird-a ps weird-b transformerpp"
            for mech in $mechs; do
                for conv in 0 4; do
                    echo "weirdnet bench recall ${ZOOLOGY[*]} --lrs $lr --lengths $length --mechanisms $mech --short-convs $conv"
                done
            done
        done
    done
    # the report of the whole grid, from the records
    echo "weirdnet bench recall ${ZOOLOGY[*]} --lrs 2.2e-3 1e-2 --lengths 64 128 256 --report-only"
}

# Equal minutes need every model named calibrated on one machine (the minutes are the
# calibrations'; see docs/design.md §13); the newer peers are calibrated last.
lane_lm() {  # about 20-40 min a run (10 calibrated minutes, evaluations, a slower VM)
    for mech in weird-a transformerpp mamba2 weird-b llama softmax weird-a-pp weird-b-pp mamba rwkv; do
        echo "weirdnet bench lm --contexts 1024 --minutes 10 --mechanisms $mech ${OUT[*]}"
    done
    echo "weirdnet bench lm --contexts 1024 --steps 100 --seeds 3 --mechanisms qwen3-next,xlstm,recurrent-gemma ${OUT[*]}"
    # the seeds that decide the headline pair first, then the other two of the four
    echo "weirdnet bench lm --contexts 1024 --minutes 10 --seeds 3 --mechanisms weird-a,transformerpp ${OUT[*]}"
    echo "weirdnet bench lm --contexts 1024 --minutes 10 --seeds 3 --mechanisms weird-b,mamba2 ${OUT[*]}"
    for mech in weird-a transformerpp mamba2 weird-b llama softmax weird-a-pp weird-b-pp mamba rwkv; do
        echo "weirdnet bench lm --contexts 4096 --minutes 10 --mechanisms $mech ${OUT[*]}"
    done
    echo "weirdnet bench lm --contexts 4096 --steps 100 --mechanisms qwen3-next,xlstm,recurrent-gemma ${OUT[*]}"
    echo "weirdnet bench lm --contexts 4096 --minutes 10 --seeds 3 --mechanisms weird-a,weird-b,transformerpp,mamba2 ${OUT[*]}"
    echo "weirdnet bench suite --budget laptop --tables today ${OUT[*]}"
}

lane_context() {  # hours a cell on one thread (a Transformer++ step at 16K: about 48 s)
    for mech in weird-b-pp transformerpp mamba2; do
        echo "weirdnet bench context --mechanisms $mech ${OUT[*]}"
    done
}

lane_listops() {  # about 35 min a Transformer cell on one thread, its first stage 3 of them
    # ListOps after a short-first curriculum: does the Transformer get past the first
    # operator at LRA's lengths?
    echo "weirdnet bench suite --budget laptop-curriculum --tables main --tasks listops --mechanisms softmax --seeds 0 ${OUT[*]}"
}

run_lane() {  # a failed command is reported and the lane goes on; a stopped one ends it
    local status=0 code
    while IFS= read -r command; do
        echo "== $(date -u +%FT%TZ) $command"
        $command
        code=$?
        if [ "$code" -eq 130 ] || [ "$code" -eq 143 ]; then
            echo "== stopped (status $code): rerun the lane to resume" >&2
            return "$code"
        fi
        [ "$code" -eq 0 ] || status=$code
    done < <("lane_$1")
    return "$status"
}

case "${1:-}" in
    lm|zoology|context|listops) run_lane "$1" ;;
    --list) for lane in lm zoology context listops; do echo "# $lane"; "lane_$lane"; done ;;
    *) echo "usage: lab/benchmarks/campaign.sh lm|zoology|context|listops|--list" >&2; exit 2 ;;
esac
