#!/usr/bin/env bash
# The layering the design promises, checked on what the packages link:
# estimator and policies are pure, the simulator links no netlink, and
# the router binary carries no plotting, fonts or embedded traces.
set -euo pipefail
cd "$(dirname "$0")/.."
fail=0
check() { # PACKAGES... -- PATTERN
	local pkgs=() pattern
	while [ "$1" != "--" ]; do pkgs+=("$1"); shift; done
	pattern=$2
	if found=$(go list -deps "${pkgs[@]}" | grep -E "$pattern"); then
		echo "layering: ${pkgs[*]} link(s) what they must not:" >&2
		echo "$found" >&2
		fail=1
	fi
}
check ./estimator ./policies -- 'netlink|netns|go-tc|go\.uber\.org/zap$|x/net/icmp|pro-bing'
check ./sim ./controller -- 'netlink|netns|go-tc'
check ./cmd/autoshape -- 'gonum|/font|autoshape/autoshape/sim$'
exit $fail
