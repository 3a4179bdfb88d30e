#!/usr/bin/env bash
# Make sure the real components the tests talk to are installed and running:
# PostgreSQL on 127.0.0.1:5432 (database `test`, trust auth), Dovecot's and Postfix's
# binaries (the tests start their own private instances on loopback), Chromium, and anvil
# (from npm into tools/node_modules; npm itself from apt when missing).
set -euo pipefail

need_apt=()
command -v dovecot >/dev/null 2>&1 || need_apt+=(dovecot-imapd dovecot-lmtpd)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v jq >/dev/null 2>&1 || need_apt+=(jq)        # the README examples' shell (tests/test_readme_examples.py)
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
if ! command -v pg_ctlcluster >/dev/null 2>&1; then need_apt+=(postgresql); fi
if [ ${#need_apt[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if ! pg_isready -h 127.0.0.1 -p 5432 -q; then
  ver=$(ls /etc/postgresql | sort -n | tail -1)
  if ! pg_lsclusters -h | grep -q "^$ver main"; then
    pg_createcluster "$ver" main >/dev/null
  fi
  pg_ctlcluster --skip-systemctl-redirect "$ver" main start || true
  for _ in $(seq 1 50); do pg_isready -h 127.0.0.1 -p 5432 -q && break; sleep 0.2; done
fi
pg_isready -h 127.0.0.1 -p 5432 -q || { echo "PostgreSQL did not start" >&2; exit 1; }
# Trust auth and a `test` database, as the tests expect.
if ! psql -h 127.0.0.1 -U postgres -d test -Atc 'select 1' >/dev/null 2>&1; then
  su postgres -c "psql -Atc \"select 1 from pg_database where datname='test'\"" | grep -q 1 \
    || su postgres -c "createdb test"
fi
psql -h 127.0.0.1 -U postgres -d test -Atc 'select 1' >/dev/null

# --- Postfix (issue 16) ------------------------------------------------------
# Debian's package; the tests start private instances on loopback (own config and
# queue directories, `postfix -c DIR start` as root). The package does not start the
# system instance here (policy-rc.d), and nothing below starts it.
if ! command -v postfix >/dev/null 2>&1 && [ ! -x /usr/sbin/postfix ]; then
  export DEBIAN_FRONTEND=noninteractive
  debconf-set-selections <<<'postfix postfix/main_mailer_type select No configuration' 2>/dev/null || true
  apt-get update -qq
  apt-get install -y -qq postfix >/dev/null
fi
# -d: the compiled-in defaults. With "No configuration" the package writes no
# /etc/postfix/main.cf, and plain `postconf` then fails; the tests bring their own.
/usr/sbin/postconf -d -h mail_version >/dev/null
# --- end Postfix -------------------------------------------------------------
# --- anvil (Foundry's EVM node) for the Base rail's node tests and `envelopay devnet` ---
# From the npm registry, pinned by tools/package.json + package-lock.json, installed into
# tools/node_modules (gitignored); envelopay_base.anvil.find_anvil() looks there first.
tools_dir="$(cd "$(dirname "$0")/.." && pwd)/tools"
if [ ! -x "$tools_dir/node_modules/.bin/anvil" ]; then
  if ! command -v npm >/dev/null 2>&1; then
    # A fresh Debian machine has no npm: install it like the other packages above.
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq npm >/dev/null
  fi
  (cd "$tools_dir" && npm ci --no-audit --no-fund --silent)
fi
"$tools_dir/node_modules/.bin/anvil" --version >/dev/null || { echo "anvil does not run" >&2; exit 1; }
# --- end anvil ---
