#!/usr/bin/env bash
# Measures the daemon's CPU time and peak memory over one minute, with six
# reflectors (addresses in a throwaway network namespace) at 40 answers per
# second (the default), on an idle link or with ~30 Mbit/s of UDP each way through it.
# Needs root, iproute2, /usr/bin/time and python3 (for the load only).
# Usage: scripts/daemon-cost.sh idle|loaded
set -euo pipefail
mode=${1:?usage: $0 idle|loaded}
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
r=as-cost-r-$$ x=as-cost-x-$$
cleanup() { ip netns del "$r" 2>/dev/null || true; ip netns del "$x" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
go build -o "$tmp/autoshape" ./cmd/autoshape
ip netns add "$r"; ip netns add "$x"
ip -n "$r" link set lo up; ip -n "$x" link set lo up
ip -n "$r" link add wan0 type veth peer name rf0 netns "$x"
ip -n "$r" addr add 10.80.0.1/24 dev wan0; ip -n "$r" link set wan0 up
for a in 2 3 4 5 6 7; do ip -n "$x" addr add "10.80.0.$a/24" dev rf0; done
ip -n "$x" link set rf0 up
cat >"$tmp/c.toml" <<EOT
state_file = "$tmp/state.json"
[log]
level = "warn"
[metrics]
listen = "127.0.0.1:19878"
[[link]]
name = "wan"
interface = "wan0"
backend = "htb"
[link.download]
min = "1mbit"
base = "20mbit"
max = "50mbit"
[link.upload]
min = "1mbit"
base = "20mbit"
max = "50mbit"
[link.probe]
method = "echo"
reflectors = ["10.80.0.2", "10.80.0.3", "10.80.0.4", "10.80.0.5", "10.80.0.6", "10.80.0.7"]
active = 6
rate = 40
EOT
load() { # namespace destination
	ip netns exec "$1" python3 -c "
import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
b = b'x' * 1400
end = time.time() + 62
while time.time() < end:
    for _ in range(27):
        s.sendto(b, ('$2', 9))
    time.sleep(0.01)
" &
}
if [ "$mode" = loaded ]; then
	load "$x" 10.80.0.1
	load "$r" 10.80.0.2
fi
ip netns exec "$r" /usr/bin/time -v timeout -s TERM 60 "$tmp/autoshape" run -c "$tmp/c.toml" 2>"$tmp/time.txt" || true
wait
grep -E "User time|System time|Maximum resident" "$tmp/time.txt"
