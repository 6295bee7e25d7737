#!/usr/bin/env bash
# Re-vendor the site's front-end files from the npm registry, so the built book needs no CDN.
# Usage: bash docs/vendor/update.sh   (edit the pinned versions below first to upgrade)
# Needs node's `npm`; everything is unpacked in a temporary folder and only the files the site loads
# are copied here: the widget embedder and its icon fonts, require.js, and one MathJax 3 component with its fonts.
set -euo pipefail

HTML_MANAGER=1.0.15   # @jupyter-widgets/html-manager: renders ipywidgets from saved state (ipywidgets 8)
REQUIREJS=2.3.8       # the AMD loader that embed-amd.js expects on the page
MATHJAX=3.2.2         # MathJax 3: tex-chtml-full.js has every TeX extension built in, so nothing autoloads

here="$(cd "$(dirname "$0")" && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

cd "$tmp"
npm pack --silent "@jupyter-widgets/html-manager@$HTML_MANAGER" "requirejs@$REQUIREJS" "mathjax@$MATHJAX" >/dev/null
for tarball in *.tgz; do
    mkdir "${tarball%.tgz}"
    tar -xzf "$tarball" -C "${tarball%.tgz}"
done
manager="$tmp/jupyter-widgets-html-manager-$HTML_MANAGER/package"
requirejs="$tmp/requirejs-$REQUIREJS/package"
mathjax="$tmp/mathjax-$MATHJAX/package"

rm -rf "$here/html-manager" "$here/requirejs" "$here/mathjax"
mkdir -p "$here/html-manager" "$here/requirejs" "$here/mathjax/output/chtml/fonts"

# embed-amd.js pulls Font Awesome icon fonts from its own folder; browsers take the woff2 ones.
cp "$manager/dist/embed-amd.js" "$manager/dist/"*.woff2 "$here/html-manager/"
# The package ships no .map files for these: drop the comments that would make dev tools ask for them.
sed -i '/^\/\/# sourceMappingURL=/d' "$here/html-manager/embed-amd.js"
cp "$requirejs/require.js" "$here/requirejs/"
cp "$mathjax/es5/tex-chtml-full.js" "$mathjax/LICENSE" "$here/mathjax/"
cp -r "$mathjax/es5/output/chtml/fonts/woff-v2" "$here/mathjax/output/chtml/fonts/"

cat > "$here/VERSIONS" <<VERSIONS
# Written by docs/vendor/update.sh: the npm packages the files in this folder come from.
@jupyter-widgets/html-manager@$HTML_MANAGER  BSD-3-Clause  html-manager/
requirejs@$REQUIREJS  MIT  requirejs/
mathjax@$MATHJAX  Apache-2.0  mathjax/
VERSIONS
du -sh "$here"
