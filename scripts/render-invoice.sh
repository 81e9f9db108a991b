#!/usr/bin/env bash
# Renders the README's example invoice to a PNG: builds gpumeter (release), writes the HTML
# invoice of `preview examples/data/finetune-2xh100.json.gz --prices examples/pricebook.toml`
# and screenshots it with headless Chromium (Debian: apt-get install -y chromium).
#
#   scripts/render-invoice.sh [OUT.png]        default: docs/invoice-example.png
#
# Rerun it whenever the example, the price book or the HTML rendering changes, and commit the
# PNG. The HTML is byte-stable; the PNG depends only on it, the window size and the installed
# Chromium and fonts. RENDER_WIDTH / RENDER_HEIGHT (pixels) override the window size, and
# GPUMETER_BIN a gpumeter binary already built (the build is then skipped).
set -euo pipefail
cd "$(dirname "$0")/.."

out="${1:-docs/invoice-example.png}"
width="${RENDER_WIDTH:-960}"
height="${RENDER_HEIGHT:-1240}"

chromium_bin="$(command -v chromium || command -v chromium-browser || true)"
if [ -z "$chromium_bin" ]; then
  echo "render-invoice: chromium not found (Debian: apt-get install -y chromium)" >&2
  exit 1
fi

bin="${GPUMETER_BIN:-}"
if [ -z "$bin" ]; then
  cargo build --release --locked -p gpumeter-cli
  bin="${CARGO_TARGET_DIR:-target}/release/gpumeter"
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$bin" preview examples/data/finetune-2xh100.json.gz --prices examples/pricebook.toml \
  --html "$work/invoice.html" >/dev/null

mkdir -p "$(dirname "$out")"
out_abs="$(cd "$(dirname "$out")" && pwd)/$(basename "$out")"
rm -f "$out_abs"
# A fresh profile, no network or extensions, scale 1 and no scrollbars: the same page gives the
# same picture on the same Chromium.
"$chromium_bin" --headless --no-sandbox --disable-gpu --hide-scrollbars \
  --force-device-scale-factor=1 --no-first-run --disable-extensions \
  --disable-background-networking --disable-sync --mute-audio \
  --user-data-dir="$work/profile" --window-size="$width,$height" \
  --screenshot="$out_abs" "file://$work/invoice.html" >"$work/chromium.log" 2>&1 || {
  echo "render-invoice: chromium failed:" >&2
  cat "$work/chromium.log" >&2
  exit 1
}
if [ ! -s "$out_abs" ]; then
  echo "render-invoice: chromium wrote no screenshot:" >&2
  cat "$work/chromium.log" >&2
  exit 1
fi
echo "$out"
