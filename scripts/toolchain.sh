#!/usr/bin/env bash
# Installs what building and testing Mulligan needs, pinned, skipping what is already there:
# the wasm32 target, cargo-leptos 0.3.11, wasm-bindgen-cli 0.2.130, Debian's chromium (only
# with --browser) and the end2end npm packages from the committed lockfile (wasm-opt from npm
# binaryen, Playwright). Nothing is downloaded from GitHub. See ../shared/TOOLCHAIN.md.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
want_browser=0
[ "${1:-}" = "--browser" ] && want_browser=1

log() { printf '\033[1m[toolchain]\033[0m %s\n' "$*" >&2; }

export PATH="$HOME/.cargo/bin:$PATH"

if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
  log "adding the wasm32-unknown-unknown target"
  rustup target add wasm32-unknown-unknown
fi

# cargo install <crate>@<version> whose lockfile needs one re-pin to build on this Rust.
install_repinned() { # crate version bin pin_pkg pin_version
  local crate=$1 version=$2 bin=$3 pkg=$4 pin=$5
  if command -v "$bin" >/dev/null 2>&1 && "$bin" --version 2>/dev/null | grep -q "$version"; then
    return 0
  fi
  log "installing $crate $version (once per machine; several minutes)"
  local src
  src=$(ls -d "$HOME"/.cargo/registry/src/*/"$crate-$version" 2>/dev/null | head -n1 || true)
  if [ -z "$src" ]; then
    # Fetches and unpacks the crate; the build itself fails on the stale lockfile, as expected.
    cargo install "$crate" --version "$version" --locked >/dev/null 2>&1 || true
    src=$(ls -d "$HOME"/.cargo/registry/src/*/"$crate-$version" | head -n1)
  fi
  local work
  work=$(mktemp -d)
  cp -r "$src" "$work/$crate"
  (cd "$work/$crate" && cargo update -p "$pkg" --precise "$pin" \
    && CARGO_PROFILE_RELEASE_LTO=thin cargo install --path . --locked)
  rm -rf "$work"
}

install_repinned wasm-bindgen-cli 0.2.130 wasm-bindgen webpki-roots 1.0.10
install_repinned cargo-leptos 0.3.11 cargo-leptos cargo-util-schemas 0.14.1

if [ "$want_browser" = 1 ] && ! [ -x /usr/bin/chromium ]; then
  log "installing Debian's chromium"
  if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi

if [ -f "$root/end2end/package-lock.json" ]; then
  stamp="$root/end2end/node_modules/.lock-stamp"
  if ! [ -f "$stamp" ] || ! cmp -s "$stamp" "$root/end2end/package-lock.json"; then
    log "installing end2end npm packages from the lockfile"
    (cd "$root/end2end" && npm ci --no-audit --no-fund --loglevel=error)
    cp "$root/end2end/package-lock.json" "$stamp"
  fi
fi
