# Helpers for the multi-node tests and benchmark: start `specd node` and
# `specd serve` processes, find their addresses, talk to the gateway, and
# kill everything started on exit. Source it after setting $specd and $models.
#   start_node NAME ROLE MODEL LISTEN [PREFIX...]  → addr[NAME]=HOST:PORT (PREFIX: e.g. ip netns exec NS)
#   start_gateway NAME ARGS...                      → addr[NAME]=its URL
# (not in $(…): the pids must stay in this shell for cleanup)
#   complete URL JSON_BODY                          → the response body (curl, bounded)
#   json_get FIELD_PATH                             → reads JSON on stdin, prints the field (node)
work=$(mktemp -d)
declare -A proc_pid=() addr=()

cleanup() {
    for name in "${!proc_pid[@]}"; do kill -9 "${proc_pid[$name]}" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

fail() {
    echo "FAIL: $*"
    for f in "$work"/*.log; do echo "--- $f (last lines)"; tail -n 15 "$f"; done
    exit 1
}

# Waits (bounded) until PATTERN appears in LOG; prints the first match.
wait_for_line() {
    local log=$1 pattern=$2 pid=$3 seconds=${4:-90} found=""
    for _ in $(seq 1 $((seconds * 10))); do
        found=$(grep -o -m 1 "$pattern" "$log" 2>/dev/null | head -n 1)
        [ -n "$found" ] && { echo "$found"; return 0; }
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

start_node() {
    local name=$1 role=$2 model=$3 listen=$4
    shift 4
    "$@" "$specd" node --role "$role" -m "$model" --listen "$listen" -t 1 ${SPECD_NODE_ARGS:-} >"$work/$name.log" 2>&1 &
    proc_pid[$name]=$!
    local line
    line=$(wait_for_line "$work/$name.log" 'listening at [0-9.]*:[0-9]*' "${proc_pid[$name]}") || fail "node $name did not start"
    addr[$name]=${line#listening at }
}

start_gateway() {
    local name=$1
    shift
    "$specd" serve -m "$models/stories15M-f32.gguf" --port 0 "$@" >"$work/$name.log" 2>&1 &
    proc_pid[$name]=$!
    addr[$name]=$(wait_for_line "$work/$name.log" 'http://127.0.0.1:[0-9]*' "${proc_pid[$name]}") || fail "gateway $name did not start"
}

start_proxy() {  # NAME UPSTREAM RTT_MS → addr[NAME]
    "$specd" delay-proxy --to "$2" --rtt-ms "$3" >"$work/$1.log" 2>&1 &
    proc_pid[$1]=$!
    addr[$1]=$(wait_for_line "$work/$1.log" '127.0.0.1:[0-9]*' "${proc_pid[$1]}") || fail "delay proxy $1 did not start"
}

# Waits for the background jobs that are not started processes (clients).
wait_clients() {
    local p known
    for p in $(jobs -p); do
        known=0
        for n in "${!proc_pid[@]}"; do [ "${proc_pid[$n]}" = "$p" ] && known=1; done
        [ $known = 1 ] || wait "$p"
    done
}

stop_proc() {  # NAME [SIGNAL]
    kill "-${2:-9}" "${proc_pid[$1]}" 2>/dev/null
    wait "${proc_pid[$1]}" 2>/dev/null
    unset "proc_pid[$1]"
}

complete() {
    curl -s --max-time 120 "$1/v1/completions" -H 'Content-Type: application/json' -d "$2"
}

json_get() {
    node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{let v;try{v=JSON.parse(s)}catch(e){process.stdout.write("(not JSON: "+s.slice(0,200)+")");return}
      for(const k of process.argv[1].split("."))v=v==null?v:v[k];process.stdout.write(typeof v=="string"?v:JSON.stringify(v))})' "$1"
}

# The greedy text of the single-process decoder (the reference).
reference_text() {  # PROMPT N
    "$specd" generate -m "$models/stories15M-f32.gguf" -p "$1" -n "$2" --temp 0 --json 2>/dev/null | json_get text
}

# Seconds-bounded poll of /health until NODE's "up" equals WANT.
wait_node_state() {  # URL ADDRESS WANT(true|false) SECONDS
    for _ in $(seq 1 $(($4 * 10))); do
        local up
        up=$(curl -s --max-time 5 "$1/health" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{try{const n=JSON.parse(s).nodes.find(n=>n.address==process.argv[1]);process.stdout.write(String(n&&n.up))}catch(e){}})' "$2")
        [ "$up" = "$3" ] && return 0
        sleep 0.1
    done
    return 1
}
