#!/usr/bin/env bash
# System packages for the test-suite on a fresh Debian 12 machine. CI runs it as root; it is
# idempotent (a second run installs nothing) and starts no service: the test fixtures start
# their own munged/slurmctld/slurmd (tests/cluster/slurm.py) and build their own namespaces.
#
#   iproute2 util-linux  ip, tc, nsenter, unshare: the emulated multi-node cluster
#   nftables             packet loss on emulated links (this kernel has no netem qdisc)
#   slurm-wlm munge      a real Slurm 22.05 cluster on the emulated nodes
#   chromium chromium-driver   browser tests of the dashboard
#   prometheus           a real Prometheus server (and promtool) scraping `commbench metrics serve`
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

if [ "$(id -u)" -ne 0 ]; then
  # in CI a missing package would turn into failed tests much later: say it here, first
  if [ "${CI:-}" = true ] || [ "${COMMBENCH_CI:-}" = 1 ]; then
    echo "setup-system.sh: needs root (apt-get) to install the test packages; CI must run as root" >&2
    exit 1
  fi
  echo "setup-system.sh: needs root (apt-get); skipping (the tests that need these packages will skip)" >&2
  exit 0
fi

pkgs=(iproute2 util-linux nftables slurm-wlm munge chromium chromium-driver prometheus)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup-system.sh: installing ${missing[*]}"
  # keep package scripts from starting munge/slurm daemons (policy-rc.d 101 = "not allowed")
  created_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    created_policy=1
  fi
  trap 'if [ "$created_policy" = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi' EXIT
  apt-get update -qq
  apt-get install -y -qq -o Dpkg::Use-Pty=0 "${missing[@]}"
fi

# munge: key and directories, for anyone who runs the system munged (`munged -f`). The fixtures
# use a private munged with their own key, so nothing here is required by the tests.
for d in /etc/munge:0700 /var/lib/munge:0711 /var/log/munge:0700 /run/munge:0755; do
  [ -d "${d%%:*}" ] || install -d -o munge -g munge -m "${d##*:}" "${d%%:*}"
done
if [ ! -s /etc/munge/munge.key ]; then
  head -c 1024 /dev/urandom > /etc/munge/munge.key
fi
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key

echo "setup-system.sh: ok ($(slurmd -V 2>/dev/null || echo 'slurm ?'); $(ip -V 2>/dev/null))"
