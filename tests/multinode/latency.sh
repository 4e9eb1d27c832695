#!/usr/bin/env bash
# The multi-node runtime under inter-node round trips of 0.1, 1 and 10 ms:
# greedy outputs stay equal to the single-process decoder's, with pipelined
# drafting and without speculation; prints tokens/s per RTT (information,
# not asserted: timing never fails a test).
#   latency.sh SPECD_BINARY MODELS_DIR netns|proxy
# netns: the target and draft nodes run in a network namespace behind a veth
#   pair with `tc netem` delay (needs root, iproute2 and the kernel's
#   sch_netem; exits 77 = skipped, saying why, when any is missing).
# proxy: the nodes on loopback behind `specd delay-proxy` relays that add
#   RTT/2 each way (works anywhere).
set -uo pipefail
specd=$1 models=$2 mode=$3
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/lib.sh"
target="$models/stories15M-f32.gguf" draft="$models/stories15M-q8_0.gguf"
rtts=(0.1 1 10)

skip() { echo "SKIPPED: $*"; exit 77; }

ns="" veth_root="" prefix=()
if [ "$mode" = netns ]; then
    [ "$(id -u)" -eq 0 ] || skip "network namespaces need root"
    command -v ip >/dev/null && command -v tc >/dev/null || skip "iproute2 (ip, tc) is not installed"
    ns="specd_lat_$$"
    veth_root="spv$$a" veth_ns="spv$$b"
    ip netns add "$ns" 2>/dev/null || skip "ip netns add is not permitted here"
    netns_cleanup() { ip link del "$veth_root" 2>/dev/null; ip netns del "$ns" 2>/dev/null; cleanup; }
    trap netns_cleanup EXIT
    # A /30 inside a namespace this test made: the only hosts on it are ours.
    ip link add "$veth_root" type veth peer name "$veth_ns" || skip "cannot create a veth pair"
    ip link set "$veth_ns" netns "$ns"
    ip addr add 10.203.77.1/30 dev "$veth_root" && ip link set "$veth_root" up
    ip -n "$ns" addr add 10.203.77.2/30 dev "$veth_ns" && ip -n "$ns" link set "$veth_ns" up && ip -n "$ns" link set lo up
    if ! err=$(tc qdisc add dev "$veth_root" root netem delay 1ms 2>&1); then
        skip "tc netem is not available ($err; the kernel lacks sch_netem) — tests/multinode/latency.sh proxy emulates the delay instead"
    fi
    tc qdisc del dev "$veth_root" root
    prefix=(ip netns exec "$ns")
    node_host=10.203.77.2
elif [ "$mode" != proxy ]; then
    echo "usage: latency.sh SPECD MODELS netns|proxy"; exit 2
fi

# Nodes (a target and a draft).
if [ "$mode" = netns ]; then
    start_node t target "$target" "$node_host:0" "${prefix[@]}"
    start_node d draft "$draft" "$node_host:0" "${prefix[@]}"
else
    start_node t target "$target" 127.0.0.1:0
    start_node d draft "$draft" 127.0.0.1:0
fi
t=${addr[t]} d=${addr[d]}
ref=$(reference_text "Once upon a time" 32)
ref2=$(reference_text "Lily and Ben went to the park." 32)

printf '| RTT ms | mode | spec fixed k=4 tokens/s | plain tokens/s |\n| ---: | --- | ---: | ---: |\n'
for rtt in "${rtts[@]}"; do
    if [ "$mode" = netns ]; then
        # netem delays egress: half the round trip on each side of the pair.
        half=$(awk -v r="$rtt" 'BEGIN{printf "%.3fms", r/2}')
        tc qdisc replace dev "$veth_root" root netem delay "$half" || fail "tc netem delay $half"
        ip netns exec "$ns" tc qdisc replace dev "$veth_ns" root netem delay "$half" || fail "tc netem delay $half in $ns"
        tt=$t dd=$d
    else
        start_proxy "pt$rtt" "$t" "$rtt"
        start_proxy "pd$rtt" "$d" "$rtt"
        tt=${addr[pt$rtt]} dd=${addr[pd$rtt]}
    fi
    start_gateway "gw$rtt" --target-nodes "$tt" --draft-nodes "$dd" --node-timeout 5000
    url=${addr[gw$rtt]}
    declare -A tps=()
    for spec in '{"adaptive":false,"draft_max":4}' '{"enabled":false}'; do
        for p in "Once upon a time" "Lily and Ben went to the park."; do
            want=$ref
            [ "$p" = "Once upon a time" ] || want=$ref2
            body=$(complete "$url" "{\"prompt\":\"$p\",\"max_tokens\":32,\"temperature\":0,\"speculative\":$spec}")
            [ "$(echo "$body" | json_get choices.0.text)" = "$want" ] || fail "RTT $rtt ms, speculative $spec: output differs: $body"
            tps[$spec]=$(echo "$body" | json_get timings.tokens_per_s)
        done
    done
    printf '| %s | %s | %.0f | %.0f |\n' "$rtt" "$mode" "${tps['{"adaptive":false,"draft_max":4}']}" "${tps['{"enabled":false}']}"
    stop_proc "gw$rtt"
    [ "$mode" = proxy ] && { stop_proc "pt$rtt"; stop_proc "pd$rtt"; }
done
echo "PASS: greedy outputs equal the single-process decoder at RTT ${rtts[*]} ms ($mode)"
