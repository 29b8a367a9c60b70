#!/usr/bin/env bash
# A throwaway one-node Ray cluster (`ray start --head --block`) under one folder, for the launcher tests.
#
#   bash scripts/ray_local.sh start DIR [CPUS]   # starts it, waits for its port, writes DIR/address (HOST:PORT)
#   hadw compare ... --launcher ray --ray-address "$(cat DIR/address)"
#   bash scripts/ray_local.sh stop DIR           # SIGTERM to its process group, SIGKILL after 5 s
#   bash scripts/ray_local.sh worker DIR HEAD CPUS [PRIVATE]   # a second node joining HEAD (HOST:PORT); stop DIR
#                                                # ends it. PRIVATE: a folder this node sees as its own empty
#                                                # tmpfs (a mount namespace): storage the other nodes cannot see
#
# Ports are picked free (GCS, Ray client, dashboard agent), logs and sockets live in DIR, the dashboard is off,
# and RAY_AUTH_MODE defaults to disabled (no token file in ~/.ray): drivers must use the same RAY_AUTH_MODE.
# Ray comes from $RAY (default: `ray` on PATH). Exit 3 with one line when it cannot start.
set -euo pipefail
cmd=${1:-}
DIR=${2:-}
CPUS=${3:-2}
if [ -z "$cmd" ] || [ -z "$DIR" ]; then
  echo "usage: $0 start|stop DIR [CPUS] | worker DIR HEAD CPUS [PRIVATE]" >&2
  exit 2
fi
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
RAY=${RAY:-ray}
export RAY_AUTH_MODE=${RAY_AUTH_MODE:-disabled}

case "$cmd" in
start)
  command -v "$RAY" >/dev/null || { echo "ray_local: $RAY not found (pip install 'hadw[cluster]')" >&2; exit 3; }
  read -r GCS_PORT CLIENT_PORT AGENT_PORT < <(python3 - <<'EOF'
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
EOF
)
  # setsid: the head and everything it spawns form one process group, which `stop` can always end.
  setsid "$RAY" start --head --block --node-ip-address 127.0.0.1 --port "$GCS_PORT" --num-cpus "$CPUS" \
    --ray-client-server-port "$CLIENT_PORT" --dashboard-agent-listen-port "$AGENT_PORT" \
    --include-dashboard false --disable-usage-stats --temp-dir "$DIR/tmp" > "$DIR/ray.log" 2>&1 &
  echo $! > "$DIR/ray.pid"
  for _ in $(seq 300); do  # up to 60 s
    if grep -q "Ray runtime started" "$DIR/ray.log"; then  # GCS and raylet are up
      echo "127.0.0.1:$GCS_PORT" > "$DIR/address"
      echo "ray_local: up (--ray-address 127.0.0.1:$GCS_PORT)"
      exit 0
    fi
    kill -0 "$(cat "$DIR/ray.pid")" 2>/dev/null || break
    sleep 0.2
  done
  echo "ray_local: the head did not come up; see $DIR/ray.log" >&2
  exit 3
  ;;
worker)
  HEAD=${3:?usage: $0 worker DIR HEAD CPUS [PRIVATE]}
  CPUS=${4:-2}
  PRIVATE=${5:-}
  command -v "$RAY" >/dev/null || { echo "ray_local: $RAY not found (pip install 'hadw[cluster]')" >&2; exit 3; }
  AGENT_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  start=("$RAY" start --address "$HEAD" --block --node-ip-address 127.0.0.1 --num-cpus "$CPUS"
    --dashboard-agent-listen-port "$AGENT_PORT" --disable-usage-stats)
  if [ -n "$PRIVATE" ]; then
    mkdir -p "$PRIVATE"
    # Its own mount namespace: an empty tmpfs over PRIVATE that only this node (and its workers) sees.
    setsid unshare --mount --propagation private bash -c 'mount -t tmpfs hadw-private "$0" && exec "$@"' \
      "$PRIVATE" "${start[@]}" > "$DIR/ray.log" 2>&1 &
  else
    setsid "${start[@]}" > "$DIR/ray.log" 2>&1 &
  fi
  echo $! > "$DIR/ray.pid"
  for _ in $(seq 300); do
    if grep -q "Ray runtime started" "$DIR/ray.log"; then
      echo "ray_local: worker up (joined $HEAD)"
      exit 0
    fi
    kill -0 "$(cat "$DIR/ray.pid")" 2>/dev/null || break
    sleep 0.2
  done
  echo "ray_local: the worker did not come up; see $DIR/ray.log" >&2
  exit 3
  ;;
stop)
  [ -f "$DIR/ray.pid" ] || { echo "ray_local: not running"; exit 0; }
  pid=$(cat "$DIR/ray.pid")
  kill -TERM -- "-$pid" 2>/dev/null || true  # the whole group: head, GCS, raylet, workers
  for _ in $(seq 50); do  # 5 s; a head with workers would drain for 30 s, pointless for a throwaway cluster
    kill -0 -- "-$pid" 2>/dev/null || { rm -f "$DIR/ray.pid"; echo "ray_local: stopped"; exit 0; }
    sleep 0.1
  done
  kill -KILL -- "-$pid" 2>/dev/null || true
  rm -f "$DIR/ray.pid"
  echo "ray_local: killed"
  ;;
*)
  echo "usage: $0 start|stop DIR [CPUS] | worker DIR HEAD CPUS [PRIVATE]" >&2
  exit 2
  ;;
esac
