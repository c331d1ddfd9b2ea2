#!/usr/bin/env bash
# Install, from Debian's packages, what `make test` and `make demo` need and the machine lacks.
# Idempotent: installs nothing when everything is there. Needs root (CI and these machines are root).
set -euo pipefail

packages=(
  postgresql-15                          # server binaries (initdb, pg_ctl); clusters are our own
  postgresql-contrib                     # btree_gist and friends
  postgresql-15-pgtap                    # the pgTAP extension
  libtap-parser-sourcehandler-pgtap-perl # pg_prove
  sqitch libdbd-pg-perl                  # the DBA's migration tool, proven compatible in the tests
  prometheus                             # a real remote-write receiver for the daemon's telemetry test; promtool checks the alert rules
  systemd                                # systemd-analyze verifies the units in deploy/systemd (test_packaging)
  softhsm2                               # a real PKCS#11 token for the CA and intent keys in an HSM (test_pkcs11)
  libvirt-clients libvirt-dev pkg-config # libvirt-python builds against them; bcd's hypervisor driver (test:///default in tests)
  gcc python3-dev                        # to build libvirt-python (it has no wheel)
  etcd-server                            # Patroni's DCS for the HA set (dev up --ha, tests/test_failover.py)
  python3                                # Debian's: runs Patroni as postgres when our Python is under /root (ha.py)
  chromium chromium-driver               # headless browser tests of the web console (Selenium; tests/test_console.py)
)

missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
python3 -m venv --help >/dev/null 2>&1 || missing+=(python3-venv)

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
