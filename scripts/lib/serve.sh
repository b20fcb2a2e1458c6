# Sourced by the scripts of the servers the tests start (moto, dynalite,
# Azurite): starting one on a free loopback port and waiting until it
# answers. Needs moto_free_port and moto_kill (scripts/lib/moto.sh).
#
# serve_on_free_port LABEL LOG LAUNCH READY [WAITS]
#     On a free loopback port, `LAUNCH PORT` in the background, its output
#     in LOG (LAUNCH must exec the server, so its pid is the server's);
#     then `READY PORT` every 0.1 s, at most WAITS times (default 100),
#     until it succeeds (0), says this attempt failed (2) or the server
#     exits. Three ports are tried (one may be taken between choosing and
#     binding it). Sets SERVED_PID and SERVED_PORT.

: "${root:?set root to the repository root before sourcing serve.sh}"

serve_on_free_port() {
    local label="$1" log="$2" launch="$3" ready="$4" waits="${5:-100}"
    local attempt port i status
    mkdir -p "$(dirname "$log")"
    SERVED_PID=""
    SERVED_PORT=""
    for attempt in 1 2 3; do
        port="$(moto_free_port)"
        "$launch" "$port" >"$log" 2>&1 &
        SERVED_PID=$!
        for i in $(seq 1 "$waits"); do
            if ! kill -0 "$SERVED_PID" 2>/dev/null; then
                break
            fi
            status=0
            "$ready" "$port" 2>/dev/null || status=$?
            if [ "$status" -eq 0 ]; then
                SERVED_PORT="$port"
                return 0
            fi
            if [ "$status" -eq 2 ]; then
                break
            fi
            sleep 0.1
        done
        moto_kill "$SERVED_PID"
        echo "$label did not answer on port $port (attempt $attempt); log:" >&2
        tail -n 20 "$log" >&2 || true
    done
    SERVED_PID=""
    echo "could not start $label" >&2
    return 1
}
