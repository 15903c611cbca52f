#!/usr/bin/env bash
# A local PostgreSQL server on this machine, for Optuna studies in a real database (`fedcli tune --storage
# postgresql+psycopg://...`) and their tests.
#
#   scripts/postgres-local.sh up      install postgresql if missing (apt, as root; `up --no-install` never installs),
#                                     create the cluster once, start it, make the role and database `fedcli`, print
#                                     the connection URL with the password masked
#   scripts/postgres-local.sh down    stop the server (its data, password and port stay for the next `up`)
#   scripts/postgres-local.sh status  whether it runs, and its URL with the password masked (exit 3: not running)
#   scripts/postgres-local.sh url     the full URL, for scripts: postgresql+psycopg://fedcli:<password>@127.0.0.1:<port>/fedcli
#                                     (exit 3 when the server does not answer)
#
# Idempotent: `up` on a running server only checks it, the role and the database. Everything is in one folder,
# FEDCLI_POSTGRES_DIR (default /var/tmp/fedcli-postgres as root, /var/tmp/fedcli-postgres-$USER otherwise):
#   data/         the cluster (PGDATA), owned by the server's user
#   sock/         its Unix socket (only the server's user connects there: peer authentication, for the set-up)
#   server.log    the server's log
#   password      the role fedcli's password, generated once (0600, the caller's)
#   port          the TCP port, chosen once: FEDCLI_POSTGRES_PORT, else 5432, else the next free one up to 5532
# The server listens on 127.0.0.1 only, passwords checked by SCRAM-SHA-256. Root may not run PostgreSQL: as root the
# server runs as the unprivileged user `postgres` (the package's; created if missing). The role fedcli may create
# databases (the tests make one per test, fedcli_test_<random>, and drop it). A statement that fails is not copied into
# the log (log_min_error_statement = panic), so the password of `ALTER ROLE` never reaches a file but its own.
set -euo pipefail

ROLE=fedcli
DB=fedcli
if [ "$(id -u)" = 0 ]; then
  STATE=${FEDCLI_POSTGRES_DIR:-/var/tmp/fedcli-postgres}
  SERVER_USER=postgres
else
  STATE=${FEDCLI_POSTGRES_DIR:-/var/tmp/fedcli-postgres-$(id -un)}
  SERVER_USER=$(id -un)
fi
PGDATA=$STATE/data
SOCK=$STATE/sock
LOG=$STATE/server.log
SECRET=$STATE/password
PORT_FILE=$STATE/port

die() { echo "postgres-local: $*" >&2; exit 1; }

find_bindir() {  # the binaries of the data's major version when there is data, else the newest installed
  local d
  if [ -n "${PG_BINDIR:-}" ]; then echo "$PG_BINDIR"; return; fi
  if [ -s "$PGDATA/PG_VERSION" ] && [ -x "/usr/lib/postgresql/$(cat "$PGDATA/PG_VERSION")/bin/postgres" ]; then
    echo "/usr/lib/postgresql/$(cat "$PGDATA/PG_VERSION")/bin"; return
  fi
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    if [ -x "$d/initdb" ] && [ -x "$d/postgres" ]; then echo "$d"; return; fi
  done
  d=$(command -v initdb 2>/dev/null || true)
  if [ -n "$d" ]; then dirname "$(readlink -f "$d")"; fi
}

install_packages() {  # $1: 1 to allow installing
  BIN=$(find_bindir)
  [ -n "$BIN" ] && [ -x "$BIN/initdb" ] && [ -x "$BIN/pg_ctl" ] && [ -x "$BIN/psql" ] && return
  if [ "$1" != 1 ]; then die "PostgreSQL is not installed (no initdb/pg_ctl/psql found); \`sudo $0 up\` installs it"; fi
  [ "$(id -u)" = 0 ] || die "PostgreSQL is not installed; run me as root to install it (apt), or install Debian's postgresql"
  echo "postgres-local: installing postgresql (apt)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q postgresql >/dev/null
  BIN=$(find_bindir)
  [ -n "$BIN" ] && [ -x "$BIN/initdb" ] || die "apt installed postgresql but no initdb was found under /usr/lib/postgresql"
}

as_server() {  # run a server binary as the server's user, from / (root's working folder may be closed to it)
  # fd 9 (the lock) closed: the server must not inherit it and hold the lock for its lifetime
  if [ "$(id -u)" = 0 ]; then (cd / && runuser -u "$SERVER_USER" -- "$@" 9>&-); else (cd / && "$@" 9>&-); fi
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

masked_url() { echo "postgresql+psycopg://$ROLE:***@127.0.0.1:$1/$DB"; }

running() { [ -d "$PGDATA" ] && as_server "$BIN/pg_ctl" -D "$PGDATA" status >/dev/null 2>&1; }

choose_port() {  # the recorded port, unless another program holds it now; else the first free one from the default
  local p first
  if [ -s "$PORT_FILE" ]; then
    p=$(cat "$PORT_FILE")
    if ! port_busy "$p"; then echo "$p"; return; fi
    echo "postgres-local: port $p is taken by another program; choosing another" >&2
  fi
  first=${FEDCLI_POSTGRES_PORT:-5432}
  for p in $(seq "$first" $((first + 100))); do
    if ! port_busy "$p"; then echo "$p"; return; fi
  done
  die "no free TCP port in $first..$((first + 100)) on 127.0.0.1"
}

write_secret() {  # the password, generated once; 0600 whatever the umask
  local tmp
  if [ ! -s "$SECRET" ]; then
    tmp=$(mktemp "$STATE/.password.XXXXXX")
    od -An -tx1 -N16 /dev/urandom | tr -d ' \n' >"$tmp"   # 32 hex digits: nothing to escape in a URL or in SQL
    chmod 600 "$tmp"
    mv "$tmp" "$SECRET"
  fi
  chmod 600 "$SECRET"
}

init_cluster() {
  local tmp
  mkdir -p "$SOCK"
  touch "$LOG"
  if [ "$(id -u)" = 0 ]; then
    id "$SERVER_USER" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$SERVER_USER"
    chown "$SERVER_USER" "$SOCK" "$LOG"
    as_server test -x "$STATE" || die "$SERVER_USER cannot reach $STATE (a parent folder is closed to it); set FEDCLI_POSTGRES_DIR"
  fi
  chmod 700 "$SOCK"
  if [ ! -s "$PGDATA/PG_VERSION" ]; then
    rm -rf "$PGDATA"
    mkdir -p "$PGDATA"
    [ "$(id -u)" = 0 ] && chown "$SERVER_USER" "$PGDATA"
    chmod 700 "$PGDATA"
    as_server "$BIN/initdb" -D "$PGDATA" -U "$SERVER_USER" --auth-local=peer --auth-host=scram-sha-256 \
      --encoding=UTF8 --locale=C >"$STATE/initdb.log" 2>&1 || { cat "$STATE/initdb.log" >&2; die "initdb failed"; }
    echo "include_if_exists = 'fedcli.conf'" | as_server tee -a "$PGDATA/postgresql.conf" >/dev/null
    echo "postgres-local: created the cluster in $PGDATA ($("$BIN/postgres" --version), user $SERVER_USER)"
  fi
  tmp=$(mktemp)
  cat >"$tmp" <<EOF
# written by fedcli's scripts/postgres-local.sh: a local server for tests (listens on 127.0.0.1 only)
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$SOCK'
password_encryption = 'scram-sha-256'
log_min_error_statement = panic
EOF
  as_server tee "$PGDATA/fedcli.conf" <"$tmp" >/dev/null
  rm -f "$tmp"
}

setup_role() {  # over the Unix socket as the server's user; the password goes through a pipe (printf is a builtin:
  # never in argv, nor in a here-document's temporary file)
  local pw
  pw=$(cat "$SECRET")
  printf '%s\n' \
    "SELECT 'CREATE ROLE $ROLE' WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$ROLE')\\gexec" \
    "ALTER ROLE $ROLE WITH LOGIN CREATEDB PASSWORD '$pw';" \
    "SELECT 'CREATE DATABASE $DB OWNER $ROLE' WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = '$DB')\\gexec" \
    | as_server "$BIN/psql" -h "$SOCK" -p "$PORT" -U "$SERVER_USER" -d postgres -v ON_ERROR_STOP=1 -qAt >/dev/null
}

answers() { "$BIN/pg_isready" -q -h 127.0.0.1 -p "$1" -d "$DB" -U "$ROLE" >/dev/null 2>&1; }

up() {
  local install=1
  [ "${1:-}" = --no-install ] && install=0
  mkdir -p "$STATE"
  exec 9>>"$STATE/lock"
  flock -w 300 9 || die "another \`$0\` holds $STATE/lock"
  install_packages "$install"
  if running; then
    PORT=$(cat "$PORT_FILE")
  else
    PORT=$(choose_port)
    init_cluster
    echo "$PORT" >"$PORT_FILE.tmp" && mv "$PORT_FILE.tmp" "$PORT_FILE"
    as_server "$BIN/pg_ctl" -D "$PGDATA" -l "$LOG" -w -t 60 start >/dev/null \
      || { tail -n 20 "$LOG" >&2; die "the server did not start (see $LOG)"; }
  fi
  write_secret
  setup_role
  answers "$PORT" || die "the server does not answer on 127.0.0.1:$PORT (see $LOG)"
  echo "postgres-local: up: $(masked_url "$PORT") (password in $SECRET, data in $PGDATA)"
}

down() {
  [ -d "$STATE" ] || { echo "postgres-local: down (never started)"; return; }
  exec 9>>"$STATE/lock"
  flock -w 300 9 || die "another \`$0\` holds $STATE/lock"
  BIN=$(find_bindir)
  if [ -n "$BIN" ] && running; then
    as_server "$BIN/pg_ctl" -D "$PGDATA" -m fast -w -t 60 stop >/dev/null
  fi
  echo "postgres-local: down"
}

live_port() {  # the port of the server when it answers, else exit 3 with why
  BIN=$(find_bindir)
  [ -n "$BIN" ] || { echo "postgres-local: PostgreSQL is not installed; \`sudo $0 up\` installs and starts it" >&2; exit 3; }
  if [ -e "$SECRET" ] && [ ! -r "$SECRET" ]; then
    echo "postgres-local: cannot read $SECRET (it is its starter's: run me as that user)" >&2
    exit 3
  fi
  if [ ! -s "$PORT_FILE" ] || [ ! -s "$SECRET" ] || ! answers "$(cat "$PORT_FILE")"; then
    echo "postgres-local: not running; \`$0 up\` starts it" >&2
    exit 3
  fi
  cat "$PORT_FILE"
}

case "${1:-}" in
  up) up "${2:-}" ;;
  down) down ;;
  status) port=$(live_port); echo "postgres-local: running: $(masked_url "$port") (data in $PGDATA)" ;;
  url) port=$(live_port); echo "postgresql+psycopg://$ROLE:$(cat "$SECRET")@127.0.0.1:$port/$DB" ;;
  *) echo "usage: $0 up [--no-install]|down|status|url" >&2; exit 2 ;;
esac
