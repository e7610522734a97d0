#!/usr/bin/env bash
# Holds every C++ file git tracks or would track (new files too) to .clang-format (Google's style, 120 columns), with
# Debian 12's clang-format 14: other versions place a few tokens differently, so the check names the version it needs
# rather than run another.
#   bash tools/check/format.sh          names each file that differs; exits 1 if any does
#   bash tools/check/format.sh --fix    formats them in place
set -euo pipefail
cd "$(dirname "$0")/../.."
cf=$(command -v clang-format-14 || true)
if [[ -z "$cf" ]]; then
  echo "format check: clang-format-14 not found (Debian package clang-format; bash tools/setup.sh installs it)" >&2
  exit 2
fi
mapfile -t files < <(git ls-files --cached --others --exclude-standard '*.cc' '*.h' '*.cu' '*.cpp')
if [[ "${1:-}" == "--fix" ]]; then
  "$cf" -i "${files[@]}"
  echo "format: ${#files[@]} files formatted"
  exit 0
fi
if ! "$cf" --dry-run --Werror "${files[@]}" 2>/tmp/joule-format.$$; then
  # One line a file: how many places differ (clang-format reports each as FILE:LINE:COLUMN: error: ...).
  sed -nE 's/^(.*):[0-9]+:[0-9]+: error: .*/\1/p' /tmp/joule-format.$$ | sort | uniq -c | awk '{print $2 ": " $1 " place(s)"}' >&2
  echo "format check: the files above differ from .clang-format; run: bash tools/check/format.sh --fix" >&2
  rm -f /tmp/joule-format.$$
  exit 1
fi
rm -f /tmp/joule-format.$$
echo "format: ${#files[@]} C++ files match .clang-format"
