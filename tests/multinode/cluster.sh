#!/usr/bin/env bash
# Multi-node end to end on loopback: a gateway, two target nodes and a draft
# node as separate processes.
#   1. greedy outputs equal the single-process decoder's, with and without
#      pipelined drafting; concurrent sessions spread over both targets
#   2. kill -9 of the draft node mid-stream: the stream goes on in plain
#      decoding, no error, same text; the restarted draft rejoins
#   3. a target that stops answering (SIGSTOP: cut off, no TCP reset): a
#      session placed there before anything streamed resumes on the other
#   4. kill -9 of a target mid-stream: its session ends with a clear
#      "unavailable" error, the other session finishes; the restarted
#      target rejoins and serves again
# Every wait is bounded; every process is killed on exit.
#   cluster.sh SPECD_BINARY MODELS_DIR
set -uo pipefail
specd=$1 models=$2
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/lib.sh"
target="$models/stories15M-f32.gguf" draft="$models/stories15M-q8_0.gguf"

start_node t1 target "$target" 127.0.0.1:0
start_node t2 target "$target" 127.0.0.1:0
start_node d1 draft "$draft" 127.0.0.1:0
t1=${addr[t1]} t2=${addr[t2]} d1=${addr[d1]}
start_gateway gw --target-nodes "$t1,$t2" --draft-nodes "$d1" --health-interval 200 --node-timeout 1500 --cluster-port 0
url=${addr[gw]}
echo "nodes: target $t1, target $t2, draft $d1; gateway $url"

# ---- 1. greedy equality and spreading
prompts=("Once upon a time" "Lily and Ben went to the park." "The sun was hot")
for p in "${prompts[@]}"; do
    ref=$(reference_text "$p" 48)
    [ -n "$ref" ] || fail "no reference text for \"$p\""
    for spec in '{"adaptive":false,"draft_max":4}' '{"enabled":false}' '{}'; do
        body=$(complete "$url" "{\"prompt\":\"$p\",\"max_tokens\":48,\"temperature\":0,\"speculative\":$spec}")
        got=$(echo "$body" | json_get choices.0.text)
        [ "$got" = "$ref" ] || fail "greedy output differs for \"$p\" speculative=$spec: got [$got] want [$ref]"
    done
    drafted=$(complete "$url" "{\"prompt\":\"$p\",\"max_tokens\":48,\"temperature\":0,\"speculative\":{\"adaptive\":false,\"draft_max\":4}}" | json_get speculative.drafted)
    [ "${drafted:-0}" -gt 0 ] || fail "no drafted tokens through the draft node for \"$p\""
done
echo "ok: greedy outputs equal the single-process decoder (3 prompts x spec fixed/off/adaptive)"

# Sampled requests run (lossless by construction; the statistics are the engine tests').
body=$(complete "$url" '{"prompt":"Once upon a time","max_tokens":32,"temperature":0.8,"seed":7,"speculative":{"adaptive":false,"draft_max":4}}')
[ "$(echo "$body" | json_get usage.completion_tokens)" = 32 ] || fail "a sampled request did not finish: $body"

for i in 1 2 3 4; do
    complete "$url" '{"prompt":"Once upon a time","max_tokens":64,"temperature":0,"speculative":{"adaptive":false,"draft_max":2}}' >"$work/c$i.json" &
done
wait_clients
ref64=$(reference_text "Once upon a time" 64)
for i in 1 2 3 4; do [ "$(json_get choices.0.text <"$work/c$i.json")" = "$ref64" ] || fail "concurrent request $i differs"; done
health=$(curl -s "$url/health")
served1=$(echo "$health" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const n=JSON.parse(s).nodes;process.stdout.write(n.filter(x=>x.role=="target").map(x=>x.served).join(" "))})')
read -r a b <<<"$served1"
[ "${a:-0}" -gt 0 ] && [ "${b:-0}" -gt 0 ] || fail "sessions did not spread over both targets (served: $served1)"
echo "ok: concurrent sessions spread over both targets (requests served: $served1)"

# ---- 2. kill -9 of the draft node mid-stream
ref200=$(reference_text "Once upon a time" 200)
curl -sN --max-time 120 "$url/v1/completions" -d '{"prompt":"Once upon a time","max_tokens":200,"temperature":0,"stream":true,"speculative":{"adaptive":false,"draft_max":2}}' >"$work/s_draft.txt" &
client=$!
wait_for_line "$work/s_draft.txt" '"text"' "$client" 60 >/dev/null || fail "the stream did not start"
stop_proc d1
wait "$client"
grep -q '"error"' "$work/s_draft.txt" && fail "the draft node's death surfaced as an error: $(grep error "$work/s_draft.txt")"
got=$(grep '^data: {' "$work/s_draft.txt" | sed 's/^data: //' | while read -r l; do echo "$l" | json_get choices.0.text; done | tr -d '\n')
[ "$got" = "$(echo -n "$ref200" | tr -d '\n')" ] || fail "the stream after the draft's death differs from the reference"
grep -q 'data: \[DONE\]' "$work/s_draft.txt" || fail "the stream did not end"
echo "ok: kill -9 of the draft node mid-stream: the stream finished in plain decoding, same text, no error"

start_node d1 draft "$draft" "$d1"
wait_node_state "$url" "$d1" true 30 || fail "the restarted draft node did not rejoin"
drafted=$(complete "$url" '{"prompt":"Once upon a time","max_tokens":32,"temperature":0,"speculative":{"adaptive":false,"draft_max":4}}' | json_get speculative.drafted)
[ "${drafted:-0}" -gt 0 ] || fail "no drafts after the draft node rejoined"
echo "ok: the restarted draft node (${addr[d1]}) rejoined and drafts again"

# ---- 3. a cut-off target (SIGSTOP): sessions placed on it before streaming resume elsewhere
kill -STOP "${proc_pid[t2]}"
for i in 1 2; do complete "$url" '{"prompt":"Once upon a time","max_tokens":48,"temperature":0}' >"$work/r$i.json" & done
wait_clients
ref48=$(reference_text "Once upon a time" 48)
for i in 1 2; do
    [ "$(json_get choices.0.text <"$work/r$i.json")" = "$ref48" ] || fail "request $i with a cut-off target: $(cat "$work/r$i.json")"
done
grep -q 'target node lost by a session.*streamed=false' "$work/gw.log" || fail "no session was resumed from the cut-off target"
wait_node_state "$url" "$t2" false 10 || fail "the cut-off target was not marked down"
kill -CONT "${proc_pid[t2]}"
wait_node_state "$url" "$t2" true 30 || fail "the target did not come back after SIGCONT"
echo "ok: a cut-off target was noticed by timeout; the session placed there resumed on the other target; it rejoined"

# ---- 4. kill -9 of a target mid-stream
for i in 1 2; do
    curl -sN --max-time 120 "$url/v1/completions" -d '{"prompt":"Once upon a time","max_tokens":200,"temperature":0,"stream":true,"speculative":{"enabled":false}}' >"$work/k$i.txt" &
    eval "client$i=$!"
done
wait_for_line "$work/k1.txt" '"text"' "$client1" 60 >/dev/null || fail "stream 1 did not start"
wait_for_line "$work/k2.txt" '"text"' "$client2" 60 >/dev/null || fail "stream 2 did not start"
stop_proc t1
wait "$client1"; wait "$client2"
errors=0 finished=0
for i in 1 2; do
    grep -q 'data: \[DONE\]' "$work/k$i.txt" || fail "stream $i did not end after the target's death"
    if grep -q '"error"' "$work/k$i.txt"; then
        grep -q '"code":"unavailable".*was lost' "$work/k$i.txt" || fail "stream $i: unclear error: $(grep error "$work/k$i.txt")"
        errors=$((errors + 1))
    else
        got=$(grep '^data: {' "$work/k$i.txt" | sed 's/^data: //' | while read -r l; do echo "$l" | json_get choices.0.text; done | tr -d '\n')
        [ "$got" = "$(echo -n "$ref200" | tr -d '\n')" ] || fail "stream $i finished with a wrong text"
        finished=$((finished + 1))
    fi
done
[ $finished -ge 1 ] || fail "the session on the surviving target did not finish"
echo "ok: kill -9 of a target mid-stream: $errors stream(s) got a clear 'unavailable' error, $finished finished"
wait_node_state "$url" "$t1" false 10 || fail "the dead target is not marked down"
start_node t1 target "$target" "$t1"
wait_node_state "$url" "$t1" true 30 || fail "the restarted target did not rejoin"
for i in 1 2 3; do
    [ "$(complete "$url" '{"prompt":"Once upon a time","max_tokens":48,"temperature":0}' | json_get choices.0.text)" = "$ref48" ] ||
        fail "a request after the target rejoined failed"
done
echo "ok: the restarted target (${addr[t1]}) rejoined and serves"
# ---- 5. a gateway that dies mid-stream leaves no KV blocks behind on its target
node_kv() {  # ADDRESS → "kv_free kv_blocks" of that node in the main gateway's /health
    curl -s --max-time 5 "$url/health" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{try{const n=JSON.parse(s).nodes.find(n=>n.address==process.argv[1]);process.stdout.write(n.kv_free+" "+n.kv_blocks)}catch(e){}})' "$1"
}
start_gateway gw2 --target-nodes "$t2" --health-interval 200
curl -sN --max-time 120 "${addr[gw2]}/v1/completions" -d '{"prompt":"Once upon a time","max_tokens":200,"temperature":0,"stream":true,"speculative":{"enabled":false}}' >"$work/g2.txt" &
client=$!
wait_for_line "$work/g2.txt" '"text"' "$client" 60 >/dev/null || fail "the stream through the second gateway did not start"
stop_proc gw2
wait "$client"
freed=0
for _ in $(seq 1 300); do
    read -r free blocks <<<"$(node_kv "$t2")"
    [ -n "${free:-}" ] && [ "$free" = "$blocks" ] && { freed=1; break; }
    sleep 0.1
done
[ $freed = 1 ] || fail "the target kept KV blocks of a dead gateway's session ($(node_kv "$t2"))"
echo "ok: kill -9 of a gateway mid-stream: its target freed the session's KV blocks"

# ---- 6. a node that joins by itself (--join the gateway's cluster port)
cport=$(grep -o 'cluster port 127.0.0.1:[0-9]*' "$work/gw.log" | head -n 1 | cut -d' ' -f3)
[ -n "$cport" ] || fail "the gateway printed no cluster port"
"$specd" node --role target -m "$target" --listen 127.0.0.1:0 -t 1 --join "$cport" >"$work/t3.log" 2>&1 &
proc_pid[t3]=$!
line=$(wait_for_line "$work/t3.log" 'listening at [0-9.]*:[0-9]*' "${proc_pid[t3]}") || fail "node t3 did not start"
wait_node_state "$url" "${line#listening at }" true 30 || fail "the node that --joined is not up at the gateway"
echo "ok: a node that --joined the gateway (${line#listening at }) is up"
curl -s "$url/health" | grep -q '"status":"ok"' || fail "the gateway is not healthy at the end"
echo "PASS: multi-node cluster on loopback"
