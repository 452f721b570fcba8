# Shared by the scripts that start a corecast server for a check.
#
#   start_corecast BINARY LOG [FLAGS...]
#
# Starts BINARY on 127.0.0.1:0 with its log (at info level, which carries
# the bound address) in LOG, stops it when the calling script exits, and
# sets CORECAST_PID and CORECAST_ADDR (host:port). Fails with the log when
# the server does not come up within 10 s.
start_corecast() {
    local bin=$1 log=$2
    shift 2
    "$bin" --listen 127.0.0.1:0 --log-level info "$@" 2>"$log" &
    CORECAST_PID=$!
    trap 'kill $CORECAST_PID 2>/dev/null || true' EXIT
    CORECAST_ADDR=""
    for _ in $(seq 1 100); do
        CORECAST_ADDR=$(grep -o 'addr=127.0.0.1:[0-9]*' "$log" | head -1 | cut -d= -f2 || true)
        [ -n "$CORECAST_ADDR" ] && return 0
        kill -0 "$CORECAST_PID" 2>/dev/null || break
        sleep 0.1
    done
    echo "corecast did not start:" >&2
    cat "$log" >&2
    return 1
}

#   start_uws BINARY LOG
#
# Starts the uWebSockets peer (../shared/peers/uws, built with its
# build.sh) on a free port, pinned to CPU 0, its output in LOG; sets
# UWS_PID and UWS_ADDR. Fails when it does not accept within 10 s.
start_uws() {
    local bin=$1 log=$2 port
    port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
    PORT=$port taskset -c 0 "$bin" >"$log" 2>&1 &
    UWS_PID=$!
    UWS_ADDR=127.0.0.1:$port
    for _ in $(seq 1 100); do
        python3 -c "import socket;socket.create_connection(('127.0.0.1',$port),0.2)" 2>/dev/null && return 0
        kill -0 "$UWS_PID" 2>/dev/null || break
        sleep 0.1
    done
    echo "the uWS peer did not start:" >&2
    cat "$log" >&2
    return 1
}
