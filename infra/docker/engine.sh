#!/usr/bin/env bash
# A Docker engine and the compose v2 plugin, for the image and compose tests (tests/docker), on a
# Debian machine where this runs as root.
#
#   infra/docker/engine.sh install   # docker.io and debootstrap from Debian's packages, and the compose
#                                    # plugin built from the Go module proxy (Debian bookworm has only
#                                    # compose v1); each only when missing, so a kept machine skips them
#   infra/docker/engine.sh start     # dockerd in the background, unless an engine already answers
#   infra/docker/engine.sh stop      # stops the dockerd that `start` started, and nothing else
set -euo pipefail

COMPOSE_VERSION=2.29.7
PLUGINS="${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins"
STARTED="${XDG_RUNTIME_DIR:-/run}/hastream-dockerd.pid"   # the pid of a dockerd that `start` started
LOG="${TMPDIR:-/tmp}/hastream-dockerd.log"

say() { echo "engine.sh: $*"; }
fail() { echo "engine.sh: error: $*" >&2; exit 1; }

install_packages() {
  local missing=()
  command -v dockerd >/dev/null || missing+=(docker.io)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  [ ${#missing[@]} -eq 0 ] && return
  [ "$(id -u)" -eq 0 ] || fail "installing ${missing[*]} needs root (apt-get)"
  say "installing ${missing[*]} from Debian's packages"
  local log
  log="$(mktemp)"
  if ! { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"; } > "$log" 2>&1; then
    tail -n 20 "$log" >&2
    fail "apt-get could not install ${missing[*]} (above)"
  fi
  rm "$log"
}

install_compose() {
  if docker compose version 2>/dev/null | grep -q "v$COMPOSE_VERSION"; then
    return
  fi
  command -v go >/dev/null || fail "the compose plugin is built with Go, which is not on PATH"
  say "building the compose plugin v$COMPOSE_VERSION from the Go module proxy (a few minutes on 2 cores)"
  local bin
  bin="$(mktemp -d)"
  if ! GOBIN="$bin" go install -ldflags "-s -w -X github.com/docker/compose/v2/internal.Version=v$COMPOSE_VERSION" \
    "github.com/docker/compose/v2/cmd@v$COMPOSE_VERSION" > "$bin/go.log" 2>&1; then
    tail -n 20 "$bin/go.log" >&2
    fail "the compose plugin did not build (above)"
  fi
  rm "$bin/go.log"
  mkdir -p "$PLUGINS"
  mv "$bin/cmd" "$PLUGINS/docker-compose"
  rmdir "$bin"
  docker compose version
}

start() {
  if docker info >/dev/null 2>&1; then
    say "a Docker engine answers already"
    return
  fi
  command -v dockerd >/dev/null || fail "dockerd is not installed: run infra/docker/engine.sh install"
  say "starting dockerd (log: $LOG)"
  setsid dockerd >"$LOG" 2>&1 < /dev/null &
  echo $! > "$STARTED"
  for _ in $(seq 120); do
    docker info >/dev/null 2>&1 && return
    kill -0 "$(cat "$STARTED")" 2>/dev/null || fail "dockerd exited: $(tail -n 3 "$LOG")"
    sleep 0.5
  done
  fail "dockerd did not answer within 60 s: $(tail -n 3 "$LOG")"
}

stop() {
  [ -f "$STARTED" ] || return 0
  local pid
  pid="$(cat "$STARTED")"
  rm -f "$STARTED"
  kill -0 "$pid" 2>/dev/null || return 0
  say "stopping dockerd ($pid)"
  kill -TERM "$pid"
  for _ in $(seq 60); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.5
  done
  kill -KILL "$pid" 2>/dev/null || true
}

case "${1:-}" in
  install) install_packages; install_compose ;;
  start) start ;;
  stop) stop ;;
  *) fail "usage: infra/docker/engine.sh install|start|stop" ;;
esac
