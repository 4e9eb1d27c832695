#!/usr/bin/env bash
# Multi-node benchmark (issue 7; a command, not a test): speculative speedup
# over plain decoding in the same topology against the inter-node round
# trip, and aggregate throughput with one vs two target replicas.
#   tools/bench-nodes.sh [SPECD_BINARY] [MODELS_DIR]
# Topology: target and draft nodes on loopback; for RTT > 0 each node sits
# behind a `specd delay-proxy` that adds RTT/2 each way (tc netem needs the
# kernel's sch_netem, which CI machines may lack). Greedy, fixed k
# (BENCH_K, default 4), BENCH_TOKENS tokens per request (default 64),
# BENCH_REPS requests per cell (default 6). Prints markdown tables.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
specd=${1:-$root/build/bin/specd}
models=${2:-$root/models}
source "$root/tests/multinode/lib.sh"
target="$models/stories15M-f32.gguf" draft="$models/stories15M-q8_0.gguf"
k=${BENCH_K:-4} n=${BENCH_TOKENS:-64} reps=${BENCH_REPS:-6}
prompts=("Once upon a time" "Lily and Ben went to the park." "The sun was hot")

# tokens/s of REPS sequential requests (sum of tokens / sum of the gateway's request times).
measure() {  # URL SPEC_JSON
    local tokens=0 ms=0 body i
    for i in $(seq 1 "$reps"); do
        body=$(complete "$1" "{\"prompt\":\"${prompts[$((i % 3))]}\",\"max_tokens\":$n,\"temperature\":0,\"speculative\":$2}")
        tokens=$((tokens + $(echo "$body" | json_get usage.completion_tokens)))
        ms=$(awk -v a="$ms" -v b="$(echo "$body" | json_get timings.total_ms)" 'BEGIN{print a+b}')
    done
    awk -v t="$tokens" -v m="$ms" 'BEGIN{printf "%.1f", 1000*t/m}'
}

# Aggregate tokens/s of C concurrent requests (wall clock).
aggregate() {  # URL C
    local t0 t1 i tokens=0
    t0=$(date +%s%N)
    for i in $(seq 1 "$2"); do
        complete "$1" "{\"prompt\":\"${prompts[$((i % 3))]}\",\"max_tokens\":$n,\"temperature\":0,\"speculative\":{\"enabled\":false}}" >"$work/agg$i.json" &
    done
    wait_clients
    t1=$(date +%s%N)
    for i in $(seq 1 "$2"); do tokens=$((tokens + $(json_get usage.completion_tokens <"$work/agg$i.json"))); done
    awk -v t="$tokens" -v ns=$((t1 - t0)) 'BEGIN{printf "%.1f", 1e9*t/ns}'
}

on="{\"adaptive\":false,\"draft_max\":$k}" off='{"enabled":false}'
echo "specd multi-node benchmark: stories15M-f32 target, q8_0 draft, greedy, k=$k, $n tokens x $reps requests per cell; $(nproc) cores"
echo

# Single node: target and draft in one process.
"$specd" serve -m "$target" --model-draft "$draft" --port 0 >"$work/single.log" 2>&1 &
proc_pid[single]=$!
single=$(wait_for_line "$work/single.log" 'http://127.0.0.1:[0-9]*' "${proc_pid[single]}") || fail "single-process serve did not start"
complete "$single" "{\"prompt\":\"warm up\",\"max_tokens\":16}" >/dev/null
s_on=$(measure "$single" "$on") s_off=$(measure "$single" "$off")
s_speedup=$(awk -v a="$s_on" -v b="$s_off" 'BEGIN{printf "%.2f", a/b}')
stop_proc single

start_node t1 target "$target" 127.0.0.1:0
start_node t2 target "$target" 127.0.0.1:0
start_node d draft "$draft" 127.0.0.1:0

echo "| topology | added RTT ms | spec tokens/s | plain tokens/s | speedup | of single-process speedup | of 0-RTT multi-node speedup |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
printf '| single process | - | %s | %s | %sx | 100%% | - |\n' "$s_on" "$s_off" "$s_speedup"
zero_speedup=""
for rtt in 0 0.1 1 10; do
    tt=${addr[t1]} dd=${addr[d]}
    if [ "$rtt" != 0 ]; then
        start_proxy "pt$rtt" "$tt" "$rtt"
        start_proxy "pd$rtt" "$dd" "$rtt"
        tt=${addr[pt$rtt]} dd=${addr[pd$rtt]}
    fi
    start_gateway "gw$rtt" --target-nodes "$tt" --draft-nodes "$dd"
    url=${addr[gw$rtt]}
    complete "$url" "{\"prompt\":\"warm up\",\"max_tokens\":16}" >/dev/null
    m_on=$(measure "$url" "$on") m_off=$(measure "$url" "$off")
    [ -n "$zero_speedup" ] || zero_speedup=$(awk -v a="$m_on" -v b="$m_off" 'BEGIN{printf "%.4f", a/b}')
    awk -v r="$rtt" -v a="$m_on" -v b="$m_off" -v s="$s_speedup" -v z="$zero_speedup" \
        'BEGIN{printf "| gateway + target node + draft node (pipelined) | %s | %s | %s | %.2fx | %.0f%% | %.0f%% |\n", r, a, b, a/b, 100*(a/b)/s, 100*(a/b)/z}'
    stop_proc "gw$rtt"
    [ "$rtt" != 0 ] && { stop_proc "pt$rtt"; stop_proc "pd$rtt"; }
done

echo
echo "| targets | concurrent requests | aggregate tokens/s (plain) |"
echo "| ---: | ---: | ---: |"
for targets in "${addr[t1]}" "${addr[t1]},${addr[t2]}"; do
    start_gateway gwagg --target-nodes "$targets"
    url=${addr[gwagg]}
    complete "$url" "{\"prompt\":\"warm up\",\"max_tokens\":16}" >/dev/null
    count=$(echo "$targets" | tr ',' '\n' | wc -l)
    printf '| %s | 4 | %s |\n' "$count" "$(aggregate "$url" 4)"
    stop_proc gwagg
done
